"""OCSP: ocsp_peer checks of client certificates against an OCSP responder this test runs (an http.server
thread signing answers with the ``cryptography`` package), the ocsp_cache, the config keys, and the refusal
of stapling without pyOpenSSL (stapling itself: tests/test_ocsp_staple.py). The same configurations run
against nats-server where the outcome is comparable."""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import http.server
import json
import os
import ssl
import threading
import urllib.parse
from typing import Any

import pytest

pytest.importorskip("cryptography")
import nats
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import ocsp
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from rillet.cluster.s2 import S2Writer
from rillet.config.errors import ConfigError
from rillet.config.ocsp_section import OCSPPeerConfig
from rillet.config.options_builder import load_string
from rillet.server.ocsp import Status, response_current
from tests.difftarget import go_server, rillet_server
from tests.helpers import free_port

NOW = lambda: dt.datetime.now(dt.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


class PKI:
    """A CA, a server certificate, client certificates whose AIA names the test's responder, and a
    delegated responder certificate."""

    def __init__(self, tmp: str, ocsp_url: str) -> None:
        self.tmp = tmp
        self.url = ocsp_url
        self.ca_key = _key()
        now = NOW()
        self.ca = (x509.CertificateBuilder().subject_name(_name("Test OCSP CA")).issuer_name(_name("Test OCSP CA"))
                   .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                  critical=True)
                   .sign(self.ca_key, hashes.SHA256()))
        self.ca_file = self._write("ca.pem", self.ca.public_bytes(serialization.Encoding.PEM))
        self.certs: dict[str, tuple[x509.Certificate, str, str]] = {}
        self.server = self.issue("localhost", server=True, aia=False)
        for name in ("good", "revoked", "unknown", "noaia"):
            self.issue(name, aia=name != "noaia")
        self.issue("muststaple", server=True, aia=False, must_staple=True)
        self.issue("hub-good", server=True)  # server certificates that name the responder (leaf hubs)
        self.issue("hub-revoked", server=True)
        self.delegate_key = _key()
        self.delegate = self._leaf_cert("Test OCSP Responder", self.delegate_key.public_key(),
                                        [ExtendedKeyUsageOID.OCSP_SIGNING], aia=False)
        self.rogue_key = _key()  # a responder certificate without the OCSP-signing purpose
        self.rogue = self._leaf_cert("Rogue Responder", self.rogue_key.public_key(),
                                     [ExtendedKeyUsageOID.CLIENT_AUTH], aia=False)

    def _write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def _leaf_cert(self, cn: str, pub: Any, eku: list, aia: bool, server: bool = False,
                   must_staple: bool = False) -> x509.Certificate:
        now = NOW()
        b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.ca.subject).public_key(pub)
             .serial_number(x509.random_serial_number())
             .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(eku), critical=False))
        if server:
            b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                             x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
                                critical=False)
        if aia:
            b = b.add_extension(x509.AuthorityInformationAccess([x509.AccessDescription(
                x509.oid.AuthorityInformationAccessOID.OCSP, x509.UniformResourceIdentifier(self.url))]),
                critical=False)
        if must_staple:
            b = b.add_extension(x509.TLSFeature([x509.TLSFeatureType.status_request]), critical=False)
        return b.sign(self.ca_key, hashes.SHA256())

    def issue(self, name: str, server: bool = False, aia: bool = True, must_staple: bool = False) -> tuple:
        key = _key()
        eku = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = self._leaf_cert(name, key.public_key(), eku, aia=aia, server=server,
                               must_staple=must_staple)
        cf = self._write(f"{name}-cert.pem", cert.public_bytes(serialization.Encoding.PEM))
        kf = self._write(f"{name}-key.pem", key.private_bytes(serialization.Encoding.PEM,
                                                               serialization.PrivateFormat.PKCS8,
                                                               serialization.NoEncryption()))
        self.certs[name] = (cert, cf, kf)
        return self.certs[name]

    def status_of(self, serial: int) -> str | None:
        for name, (cert, _, _) in self.certs.items():
            if cert.serial_number == serial:
                return name
        return None


class Responder:
    """An OCSP responder on a local port: answers GET /<base64 request> per ``mode``:
    by certificate name (good/revoked/unknown), "expired" (nextUpdate in the past), "future" (thisUpdate
    ahead), "delegate" (signed by the delegated responder), "rogue" (by a certificate without the
    OCSP-signing purpose), "silent" (accepts and never answers), "http500"."""

    def __init__(self) -> None:
        self.port = free_port()
        self.mode = "normal"
        self.requests = 0
        self.posts = 0
        self.no_post = False  # a responder that answers GET only (POST gets an error page)
        self.pki: PKI | None = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests += 1
                if outer.mode == "silent":
                    threading.Event().wait(5)
                    return
                if outer.mode == "http500":
                    self.send_response(500)
                    self.end_headers()
                    return
                enc = urllib.parse.unquote(self.path.lstrip("/"))
                self._reply(ocsp.load_der_ocsp_request(base64.b64decode(enc)))

            def do_POST(self) -> None:  # (nats-server's stapling asks by POST first, GET after)
                outer.posts += 1
                if outer.mode in ("silent", "http500"):
                    self.do_GET()
                    return
                if outer.no_post:
                    self.send_response(405)
                    self.end_headers()
                    return
                der = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._reply(ocsp.load_der_ocsp_request(der))

            def _reply(self, req: ocsp.OCSPRequest) -> None:
                body = outer.answer(req)
                self.send_response(200)
                self.send_header("Content-Type", "application/ocsp-response")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, req: ocsp.OCSPRequest) -> bytes:
        pki = self.pki
        assert pki is not None
        name = pki.status_of(req.serial_number) or "unknown"
        cert = pki.certs[name][0]
        now = NOW()
        this, nxt = now - dt.timedelta(minutes=1), now + dt.timedelta(hours=1)
        if self.mode == "expired":
            this, nxt = now - dt.timedelta(hours=3), now - dt.timedelta(hours=2)
        elif self.mode == "future":
            this, nxt = now + dt.timedelta(hours=1), now + dt.timedelta(hours=2)
        status = {"revoked": ocsp.OCSPCertStatus.REVOKED, "unknown": ocsp.OCSPCertStatus.UNKNOWN}.get(
            name.rsplit("-", 1)[-1], ocsp.OCSPCertStatus.GOOD)
        if self.mode == "all-revoked":
            status = ocsp.OCSPCertStatus.REVOKED
        b = ocsp.OCSPResponseBuilder().add_response(
            cert=cert, issuer=pki.ca, algorithm=hashes.SHA1(), cert_status=status, this_update=this,
            next_update=nxt,
            revocation_time=now - dt.timedelta(days=1) if status == ocsp.OCSPCertStatus.REVOKED else None,
            revocation_reason=None)
        signer, key = pki.ca, pki.ca_key
        if self.mode == "delegate":
            signer, key = pki.delegate, pki.delegate_key
            b = b.certificates([pki.delegate])
        elif self.mode == "rogue":
            signer, key = pki.rogue, pki.rogue_key
            b = b.certificates([pki.rogue])
        b = b.responder_id(ocsp.OCSPResponderEncoding.HASH, signer)
        return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pki(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default ocsp_cache (local, ./_rc_) of both servers lands here
    r = Responder()
    p = PKI(str(tmp_path), r.url)
    r.pki = p
    p.responder = r  # type: ignore[attr-defined]
    yield p
    r.close()


def _conf(pki: PKI, peer: str = "ocsp_peer: true", extra: str = "") -> str:
    _, cf, kf = pki.server
    return (f"listen: 127.0.0.1:{{port}}\n{extra}\ntls {{\n  cert_file: \"{cf}\"\n  key_file: \"{kf}\"\n"
            f"  ca_file: \"{pki.ca_file}\"\n  verify: true\n  timeout: 3\n  {peer}\n}}\n")


def _client_ctx(pki: PKI, name: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    _, cf, kf = pki.certs[name]
    ctx.load_cert_chain(cf, kf)
    return ctx


async def _connects(url: str, pki: PKI, name: str) -> bool:
    try:
        nc = await nats.connect(url, tls=_client_ctx(pki, name), connect_timeout=4, allow_reconnect=False,
                                max_reconnect_attempts=0)
    except Exception:
        return False
    try:
        await nc.publish("x", b"1")
        await nc.flush(timeout=3)
        return True
    except Exception:
        return False
    finally:
        await nc.close()


def _url(srv: Any) -> str:
    return srv.client_url.replace("nats://", "tls://")


def _fill(conf: str) -> str:
    return conf.replace("{port}", str(free_port()))


# ---- peer checks, Rillet ------------------------------------------------------------------------------

async def test_client_status_good_revoked_unknown(pki, tmp_path):
    async with rillet_server(_fill(_conf(pki, extra=f'ocsp_cache {{ local_store: "{tmp_path}/rc" }}'))) as srv:
        url = _url(srv)
        assert await _connects(url, pki, "good")
        assert not await _connects(url, pki, "revoked")
        assert not await _connects(url, pki, "unknown")
        assert await _connects(url, pki, "noaia")  # no responder named: nothing to check
        log = srv._test_log.getvalue()
        assert "client not OCSP valid" in log
        assert "with CA status [revoked]" in log and "with CA status [unknown]" in log


async def test_unknown_is_good_and_warn_only(pki):
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, unknown_is_good: true }"))) as srv:
        assert await _connects(_url(srv), pki, "unknown")
        assert not await _connects(_url(srv), pki, "revoked")
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, warn_only: true }"))) as srv:
        assert await _connects(_url(srv), pki, "revoked")
        assert "but WarnOnly is true so allowing" in srv._test_log.getvalue()


@pytest.mark.parametrize("mode", ["expired", "future", "rogue", "http500"])
async def test_bad_responses_refused(pki, mode):
    pki.responder.mode = mode
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, allowed_clockskew: 5 }"))) as srv:
        assert not await _connects(_url(srv), pki, "good")


async def test_delegated_responder(pki):
    pki.responder.mode = "delegate"
    async with rillet_server(_fill(_conf(pki))) as srv:
        assert await _connects(_url(srv), pki, "good")
        assert not await _connects(_url(srv), pki, "revoked")


async def test_responder_does_not_answer(pki):
    pki.responder.mode = "silent"
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, ca_timeout: 0.5 }"))) as srv:
        assert not await _connects(_url(srv), pki, "good")
        assert "within 0.5s" in srv._test_log.getvalue()
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, ca_timeout: 3 }"))) as srv:
        # the server goes on serving while a check waits on the responder (it is a coroutine)
        loop = asyncio.get_running_loop()
        slow = asyncio.create_task(_connects(_url(srv), pki, "good"))
        await asyncio.sleep(0.3)
        t0 = loop.time()
        assert await _connects(_url(srv), pki, "noaia")
        assert loop.time() - t0 < 2.0 and not slow.done()
        assert not await slow
    conf = "ocsp_peer { verify: true, ca_timeout: 0.5, allow_when_ca_unreachable: true }"
    async with rillet_server(_fill(_conf(pki, conf))) as srv:
        assert await _connects(_url(srv), pki, "good")
        assert "AllowWhenCAUnreachable set; no cached revocation so allowing" in srv._test_log.getvalue()


async def test_cache_used_and_saved(pki, tmp_path):
    store = tmp_path / "rc"
    extra = f'ocsp_cache {{ type: local, local_store: "{store}", save_interval: 1 }}'
    async with rillet_server(_fill(_conf(pki, extra=extra))) as srv:
        assert await _connects(_url(srv), pki, "good")
        n = pki.responder.requests
        assert await _connects(_url(srv), pki, "good")
        assert pki.responder.requests == n  # answered from the cache
    saved = json.loads((store / "cache.json").read_text())
    assert [v["resp_status"] for v in saved.values()] == ["good"]
    # a new server loads the saved cache: no request for the same certificate
    pki.responder.mode = "silent"
    async with rillet_server(_fill(_conf(pki, "ocsp_peer { verify: true, ca_timeout: 0.5 }", extra))) as srv:
        assert await _connects(_url(srv), pki, "good")


async def test_varz_ocsp_peer_cache_same_as_nats_server(pki, tmp_path):
    """/varz ``ocsp_peer_cache`` after the same checks on both servers: hits, misses and the cached
    responses by status (zero counts left out); no section with ocsp_cache type none."""
    import urllib.request
    got = {}
    for which, factory in (("rillet", rillet_server), ("go", go_server)):
        mport = free_port()
        extra = f'http: "127.0.0.1:{mport}"\nocsp_cache {{ local_store: "{tmp_path}/rc-{which}" }}'
        async with factory(_fill(_conf(pki, extra=extra))) as srv:
            for name in ("good", "revoked", "good", "unknown", "good"):
                await _connects(_url(srv), pki, name)
            body = await asyncio.get_running_loop().run_in_executor(
                None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{mport}/varz", timeout=5).read())
            got[which] = json.loads(body).get("ocsp_peer_cache")
    assert got["rillet"] == got["go"] == {
        "cache_type": "local", "cache_hits": 2, "cache_misses": 3, "cached_responses": 3,
        "cached_revoked_responses": 1, "cached_good_responses": 1, "cached_unknown_responses": 1}
    mport = free_port()
    async with rillet_server(_fill(_conf(pki, extra=f'http: "127.0.0.1:{mport}"\nocsp_cache {{ type: none }}'))):
        body = await asyncio.get_running_loop().run_in_executor(
            None, lambda: urllib.request.urlopen(f"http://127.0.0.1:{mport}/varz", timeout=5).read())
        assert "ocsp_peer_cache" not in json.loads(body)


@pytest.mark.parametrize("writer,reader", [("go", "rillet"), ("rillet", "go")])
async def test_cache_file_shared_with_nats_server(pki, tmp_path, writer, reader):
    """The cache file one server saves (at shutdown) answers the other's check: with the responder silent,
    the good certificate is accepted from the cache and the revoked one is still refused."""
    factories = {"rillet": rillet_server, "go": go_server}
    extra = f'ocsp_cache {{ local_store: "{tmp_path}/shared" }}'
    async with factories[writer](_fill(_conf(pki, extra=extra))) as srv:
        assert await _connects(_url(srv), pki, "good")
        assert not await _connects(_url(srv), pki, "revoked")
    saved = json.loads((tmp_path / "shared" / "cache.json").read_text())
    assert sorted(v["resp_status"] for v in saved.values()) == ["good", "revoked"]
    pki.responder.mode = "silent"
    n = pki.responder.requests
    async with factories[reader](_fill(_conf(pki, "ocsp_peer { verify: true, ca_timeout: 0.5 }", extra))) as srv:
        assert await _connects(_url(srv), pki, "good")
        assert not await _connects(_url(srv), pki, "revoked")
    assert pki.responder.requests == n


async def test_cache_none_asks_every_time(pki):
    async with rillet_server(_fill(_conf(pki, extra="ocsp_cache: false"))) as srv:
        assert await _connects(_url(srv), pki, "good")
        n = pki.responder.requests
        assert await _connects(_url(srv), pki, "good")
        assert pki.responder.requests == n + 1


async def test_preserve_revoked(pki, tmp_path):
    """A cached revocation, no longer current, is kept with preserve_revoked: with the CA unreachable and
    allow_when_ca_unreachable set, that certificate is still refused."""
    store = tmp_path / "rc"
    extra = f'ocsp_cache {{ local_store: "{store}", preserve_revoked: true }}'
    async with rillet_server(_fill(_conf(pki, extra=extra))) as srv:
        assert not await _connects(_url(srv), pki, "revoked")
        assert await _connects(_url(srv), pki, "good")
    data = json.loads((store / "cache.json").read_text())
    # make both cached answers stale: swap in ones whose nextUpdate has passed
    pki.responder.mode = "expired"
    for key, item in data.items():
        name = "revoked" if item["resp_status"] == "revoked" else "good"
        cert = pki.certs[name][0]
        req = ocsp.OCSPRequestBuilder().add_certificate(cert, pki.ca, hashes.SHA1()).build()
        item["resp"] = base64.b64encode(S2Writer().encode(pki.responder.answer(req))).decode()
    (store / "cache.json").write_text(json.dumps(data))
    pki.responder.mode = "silent"
    conf = "ocsp_peer { verify: true, ca_timeout: 0.3, allow_when_ca_unreachable: true }"
    async with rillet_server(_fill(_conf(pki, conf, extra))) as srv:
        assert not await _connects(_url(srv), pki, "revoked"), srv._test_log.getvalue()
        assert await _connects(_url(srv), pki, "good")
        assert "cached revocation exists so rejecting" in srv._test_log.getvalue(), srv._test_log.getvalue()


async def test_reload_turns_ocsp_peer_on_and_changes_the_cache(pki, tmp_path):
    from rillet.config.flags import parse_command_line
    path = tmp_path / "r.conf"
    base = _fill(_conf(pki, "ocsp_peer: false"))
    async with rillet_server(base) as srv:
        assert await _connects(_url(srv), pki, "revoked")
        port = srv.addr[1] if hasattr(srv, "addr") else int(srv.client_url.rsplit(":", 1)[1])
        text = base.replace("ocsp_peer: false", "ocsp_peer: true")
        text = text.replace(text.split("\n", 1)[0], f"listen: 127.0.0.1:{port}")
        path.write_text(text + f'ocsp_cache {{ local_store: "{tmp_path}/one" }}\n')
        srv.reload(parse_command_line(["-c", str(path)]).options)
        assert not await _connects(_url(srv), pki, "revoked")
        assert await _connects(_url(srv), pki, "good")
        path.write_text(text + f'ocsp_cache {{ local_store: "{tmp_path}/two" }}\n')
        srv.reload(parse_command_line(["-c", str(path)]).options)
        assert (tmp_path / "one" / "cache.json").exists()  # the replaced cache was saved
        assert await _connects(_url(srv), pki, "good")
    assert (tmp_path / "two" / "cache.json").exists()


async def test_tls_first_client_held_until_checked(pki):
    conf = _conf(pki).replace("  timeout: 3\n", "  timeout: 3\n  handshake_first: true\n")
    async with rillet_server(_fill(conf)) as srv:
        for name, ok in (("good", True), ("revoked", False)):
            try:
                nc = await nats.connect(_url(srv), tls=_client_ctx(pki, name), tls_handshake_first=True,
                                        connect_timeout=4, allow_reconnect=False)
            except Exception:
                assert not ok
            else:
                assert ok
                await nc.close()


@pytest.mark.parametrize("target", ["rillet", "go"])
async def test_peer_advisories(pki, target):
    """The system account hears of the refusal: $SYS.SERVER.<id>.OCSP.PEER.LINK.INVALID (the revoked link)
    and .CONN.REJECT (the peer), with nats-server's fields."""
    extra = ('accounts { SYS { users [ { user: sys, password: sys } ] }, A { users [ { user: a, password: a } ] } }\n'
             'system_account: SYS\n')
    async with {"rillet": rillet_server, "go": go_server}[target](_fill(_conf(pki, extra=extra))) as srv:
        nc = await nats.connect(_url(srv), tls=_client_ctx(pki, "good"), user="sys", password="sys")
        got: list = []

        async def note(m: Any) -> None:
            got.append(m)
        await nc.subscribe("$SYS.SERVER.*.OCSP.PEER.>", cb=note)
        await nc.flush()
        assert not await _connects(_url(srv), pki, "revoked")
        for _ in range(100):
            if len(got) >= 2:
                break
            await asyncio.sleep(0.05)
        await nc.close()
    by_kind = {m.subject.rsplit(".", 2)[-2] + "." + m.subject.rsplit(".", 1)[-1]: json.loads(m.data) for m in got}
    assert sorted(by_kind) == ["CONN.REJECT", "LINK.INVALID"]
    rej, link = by_kind["CONN.REJECT"], by_kind["LINK.INVALID"]
    assert list(rej) == ["type", "id", "timestamp", "kind", "peer", "server", "reason"]
    assert (rej["type"], rej["kind"], rej["reason"]) == (
        "io.nats.server.advisory.v1.ocsp_peer_reject", "Client", "client not OCSP valid")
    assert list(link) == ["type", "id", "timestamp", "link", "peer", "server", "reason"]
    assert (link["type"], link["reason"]) == ("io.nats.server.advisory.v1.ocsp_peer_link_invalid",
                                              "Invalid OCSP response status: revoked")
    cert = pki.certs["revoked"][0]
    assert rej["peer"]["subject"] == link["link"]["subject"] == "CN=revoked"
    assert rej["peer"]["issuer"] == "CN=Test OCSP CA"
    assert base64.b64decode(rej["peer"]["raw"]) == cert.public_bytes(serialization.Encoding.DER)
    assert rej["peer"]["fingerprint"] == base64.b64encode(
        __import__("hashlib").sha256(cert.public_bytes(serialization.Encoding.DER)).digest()).decode()


# ---- websocket and MQTT ---------------------------------------------------------------------------------

def _tls_block(pki: PKI, peer: str = "") -> str:
    _, cf, kf = pki.server
    return (f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}", verify: true\n {peer} }}')


async def _ws_connects(port: int, pki: PKI, name: str) -> bool:
    """A websocket upgrade over TLS with this client certificate, then the server's INFO frame."""
    import aiohttp
    async with aiohttp.ClientSession() as session:
        try:
            ws = await session.ws_connect(f"wss://127.0.0.1:{port}", ssl=_client_ctx(pki, name),
                                          timeout=aiohttp.ClientWSTimeout(ws_close=2))
        except (TimeoutError, aiohttp.ClientError, OSError):
            return False
        try:
            msg = await asyncio.wait_for(ws.receive(), 4)
            return msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT) and b"INFO" in (
                msg.data if isinstance(msg.data, bytes) else msg.data.encode())
        finally:
            await ws.close()


async def _mqtt_connects(port: int, pki: PKI, name: str) -> bool:
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=_client_ctx(pki, name)), 4)
    except (TimeoutError, OSError, ssl.SSLError):
        return False
    cid = name.encode()
    body = b"\x00\x04MQTT\x04\x02\x00\x3c" + len(cid).to_bytes(2, "big") + cid  # CONNECT, clean session
    try:
        w.write(bytes([0x10, len(body)]) + body)
        return await asyncio.wait_for(r.readexactly(4), 4) == b"\x20\x02\x00\x00"  # CONNACK accepted
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ssl.SSLError):
        return False
    finally:
        w.close()


@pytest.mark.parametrize("target", ["rillet", "go"])
async def test_websocket_clients_checked(pki, target):
    wsport = free_port()
    conf = (f"listen: 127.0.0.1:{{port}}\n"
            f"websocket {{ listen: \"127.0.0.1:{wsport}\", {_tls_block(pki, 'ocsp_peer: true')} }}\n")
    async with {"rillet": rillet_server, "go": go_server}[target](_fill(conf)):
        assert await _ws_connects(wsport, pki, "good")
        assert not await _ws_connects(wsport, pki, "revoked")


@pytest.mark.parametrize("target", ["rillet", "go"])
async def test_mqtt_follows_the_client_ports_ocsp_peer(pki, tmp_path, target):
    """As nats-server: MQTT connections are checked with the top-level tls block's ocsp_peer."""
    mport = free_port()
    conf = (f"listen: 127.0.0.1:{{port}}\nserver_name: m1\njetstream {{ store_dir: \"{tmp_path}/js\" }}\n"
            f"{_tls_block(pki, 'ocsp_peer: true')}\n"
            f"mqtt {{ listen: \"127.0.0.1:{mport}\", {_tls_block(pki)} }}\n")
    async with {"rillet": rillet_server, "go": go_server}[target](_fill(conf)):
        assert await _mqtt_connects(mport, pki, "good")
        assert not await _mqtt_connects(mport, pki, "revoked")


# ---- leaf connections -----------------------------------------------------------------------------------

def _leaf_hub(pki: PKI, cert: str, verify: bool, peer: str = "") -> str:
    _, cf, kf = pki.certs[cert] if cert in pki.certs else pki.server
    return (f'leafnodes {{ listen: "127.0.0.1:-1", tls {{ cert_file: "{cf}", key_file: "{kf}", '
            f'ca_file: "{pki.ca_file}", verify: {str(verify).lower()}\n {peer} }} }}')


def _leaf_remote(pki: PKI, port: int, client: str | None, peer: str = "") -> str:
    cert = ""
    if client is not None:
        _, cf, kf = pki.certs[client]
        cert = f'cert_file: "{cf}", key_file: "{kf}", '
    return (f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{port}", '
            f'tls {{ {cert}ca_file: "{pki.ca_file}"\n {peer} }} }} ] }}')


async def test_leaf_hub_checks_the_leafs_certificate(pki):
    from tests.test_cluster_leaf import _until, hub_port, leaf_ready, rillet
    async with rillet(_leaf_hub(pki, "localhost", True, "ocsp_peer: true"), "hub") as hub:
        async with rillet(_leaf_remote(pki, hub_port(hub), "good"), "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), what="OCSP-good leaf")
        async with rillet(_leaf_remote(pki, hub_port(hub), "revoked"), "leaf") as leaf:
            await _until(lambda: "client not OCSP valid" in hub._test_log.getvalue(), what="refusal")
            assert not leaf_ready(leaf)


async def test_leaf_remote_checks_the_hubs_certificate(pki):
    from tests.test_cluster_leaf import _until, hub_port, leaf_ready, rillet
    for cert, ok in (("hub-good", True), ("hub-revoked", False)):
        async with rillet(_leaf_hub(pki, cert, False), "hub") as hub:
            async with rillet(_leaf_remote(pki, hub_port(hub), None, "ocsp_peer: true"), "leaf") as leaf:
                if ok:
                    await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), what="OCSP-good hub")
                else:
                    await _until(lambda: "server not OCSP valid" in leaf._test_log.getvalue(), what="refusal")
                    assert not leaf_ready(leaf)


async def test_leaf_hub_refusal_same_as_nats_server(pki, tmp_path):
    """A Go hub with ocsp_peer and a Rillet leaf: the revoked leaf certificate is refused by both hubs."""
    from tests.test_cluster_leaf import _go, _until, leaf_ready, rillet
    for client, ok in (("good", True), ("revoked", False)):
        lport = free_port()
        hub_conf = _leaf_hub(pki, "localhost", True, "ocsp_peer: true").replace("127.0.0.1:-1",
                                                                                 f"127.0.0.1:{lport}")
        go, _, _ = _go(hub_conf, str(tmp_path))
        with go:
            await asyncio.get_running_loop().run_in_executor(None, go.wait_ready)
            async with rillet(_leaf_remote(pki, lport, client), "leaf") as leaf:
                if ok:
                    await _until(lambda: leaf_ready(leaf), what="leaf of a Go hub")
                else:
                    await asyncio.sleep(1.5)
                    assert not leaf_ready(leaf)


def test_leaf_over_websocket_with_ocsp_peer_refused():
    with pytest.raises(ConfigError) as e:
        load_string('leafnodes { remotes [ { url: "wss://127.0.0.1:1", tls { ocsp_peer: true } } ] }', "o.conf")
    assert "ocsp_peer on a leaf connection over websocket" in str(e.value)


# ---- the same against nats-server -----------------------------------------------------------------------

@pytest.mark.parametrize("peer,mode,expect", [
    ("ocsp_peer: true", "normal", {"good": True, "revoked": False, "unknown": False, "noaia": True}),
    ("ocsp_peer { verify: true, unknown_is_good: true }", "normal", {"unknown": True, "revoked": False}),
    ("ocsp_peer { verify: true, allowed_clockskew: 5 }", "expired", {"good": False}),
    ("ocsp_peer { verify: true, ca_timeout: 0.5 }", "silent", {"good": False}),
    ("ocsp_peer { verify: true, ca_timeout: 0.5, allow_when_ca_unreachable: true }", "silent", {"good": True}),
    ("ocsp_peer { verify: true, warn_only: true }", "normal", {"revoked": True}),
])
async def test_same_as_nats_server(pki, tmp_path, peer, mode, expect):
    pki.responder.mode = mode
    conf = _conf(pki, peer, extra=f'ocsp_cache {{ local_store: "{tmp_path}/rc-%s" }}')
    results = {}
    for which, factory in (("rillet", rillet_server), ("go", go_server)):
        async with factory(_fill(conf.replace("%s", which))) as srv:
            results[which] = {name: await _connects(_url(srv), pki, name) for name in expect}
    assert results["rillet"] == results["go"] == expect


# ---- config -----------------------------------------------------------------------------------------------

def test_ocsp_config_keys():
    o = load_string('ocsp { mode: never, urls: ["http://a"] }\n'
                    'ocsp_cache { type: local, local_store: "/x", preserve_revoked: true, save_interval: "0s" }\n'
                    'tls { cert_file: a, key_file: b, verify: true\n'
                    '  ocsp_peer { verify: true, ca_timeout: "3s", allowed_clockskew: 10, warn_only: true,\n'
                    '    unknown_is_good: true, allow_when_ca_unreachable: true,'
                    ' cache_ttl_when_next_update_unset: 60 } }\n', "o.conf")
    assert o.ocsp.mode == "never" and o.ocsp.urls == ["http://a"]
    assert (o.ocsp_cache.type, o.ocsp_cache.local_store, o.ocsp_cache.preserve_revoked,
            o.ocsp_cache.save_interval) == ("local", "/x", True, 1.0)
    p = o.tls.ocsp_peer
    assert (p.verify, p.ca_timeout, p.clock_skew, p.warn_only, p.unknown_is_good, p.allow_when_ca_unreachable,
            p.ttl_unset_next_update) == (True, 3.0, 10.0, True, True, True, 60.0)
    assert load_string("ocsp_cache: false\n", "o.conf").ocsp_cache.type == "none"


@pytest.mark.parametrize("text,where,msg", [
    ("ocsp { mode: sometimes }\n", (1, 7), "error parsing ocsp config: unsupported ocsp mode string"),
    ("ocsp { nope: 1 }\n", (1, 7), "error parsing ocsp config: unsupported field string"),
    ("ocsp_cache { type: disk }\n", (1, 13), "error parsing OCSP peer cache config, unknown type [disk]"),
    ("ocsp_cache { size: 1 }\n", (1, 13), 'error parsing OCSP peer cache config, unknown field ["size"]'),
    ("tls { cert_file: a, key_file: b, verify: true, ocsp_peer { speed: 1 } }\n", (1, 59),
     'error parsing tls peer config, unknown field ["speed"]'),
    ("tls { cert_file: a, key_file: b, ocsp_peer: true }\n", None,
     "OCSP peer verification for client connections requires TLS verify (mTLS) to be enabled"),
    ("cluster { port: -1, tls { cert_file: a, key_file: b, ocsp_peer: true } }\n", None,
     "'ocsp_peer' is not supported in the cluster tls block"),
    ("mqtt { port: -1, tls { cert_file: a, key_file: b, ocsp_peer: true } }\n", None,
     "'ocsp_peer' is not supported in the mqtt tls block"),
    ("websocket { port: -1, tls { cert_file: a, key_file: b, ocsp_peer: true } }\n", None,
     "OCSP peer verification for client connections requires TLS verify (mTLS) to be enabled"),
])
def test_ocsp_config_errors(text, where, msg, tmp_path, monkeypatch):
    """(positions as nats-server -t reports them; compared with it)"""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_string(text, "o.conf")
    assert msg in str(e.value)
    if where is not None:
        assert (e.value.line, e.value.column) == where
    if where is not None:  # nats-server -t: the same words at the same place
        import subprocess
        path = os.path.join(os.getcwd(), "o.conf")
        with open(path, "w") as f:
            f.write(text)
        out = subprocess.run(["nats-server", "-t", "-c", path], capture_output=True, text=True, timeout=10)
        assert out.returncode != 0
        assert f"{path}:{where[0]}:{where[1]}: {msg}" in out.stdout + out.stderr


def test_stapling_refused_only_without_pyopenssl(pki, monkeypatch):
    """Stapling (tests/test_ocsp_staple.py) needs pyOpenSSL; without it a configuration that would staple
    is refused at load, with what to install, and one that would not staple loads."""
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "OpenSSL" else real(name, *a))
    _, cf, kf = pki.server
    tls = f'tls {{ cert_file: "{cf}", key_file: "{kf}" }}\n'
    for ok in ("ocsp: false\n", "ocsp: true\n", "ocsp { mode: auto }\n", "ocsp { mode: must }\n",
               "ocsp { mode: never }\n"):
        load_string(ok + tls, "o.conf")  # no must-staple certificate: nothing stapled, as nats-server
    with pytest.raises(ConfigError) as e:
        load_string("ocsp { mode: always }\n" + tls, "o.conf")
    assert "needs the pyOpenSSL package" in str(e.value) and e.value.line == 1
    _, cf, kf = pki.certs["muststaple"]
    staple = f'tls {{ cert_file: "{cf}", key_file: "{kf}" }}\n'
    for mode in ("auto", "must"):
        with pytest.raises(ConfigError) as e:
            load_string(f"ocsp {{ mode: {mode} }}\n" + staple, "o.conf")
        assert "must-staple" in str(e.value)
    load_string("ocsp { mode: never }\n" + staple, "o.conf")
    monkeypatch.undo()
    load_string("ocsp { mode: always }\n" + tls, "o.conf")  # with pyOpenSSL: loads


def test_effectivity_window():
    cfg = OCSPPeerConfig(verify=True, clock_skew=30, ttl_unset_next_update=3600)
    now = NOW()
    assert response_current(Status("good", now - dt.timedelta(minutes=1), now + dt.timedelta(minutes=1)), cfg, now)
    assert response_current(Status("good", now, now - dt.timedelta(seconds=20)), cfg, now)  # within skew
    assert not response_current(Status("good", now, now - dt.timedelta(seconds=40)), cfg, now)
    assert not response_current(Status("good", now + dt.timedelta(seconds=40), None), cfg, now)
    assert response_current(Status("good", now - dt.timedelta(minutes=50), None), cfg, now)
    assert not response_current(Status("good", now - dt.timedelta(minutes=70), None), cfg, now)


def test_plain_s2_framing_is_a_valid_s2_stream():
    """Without the composition root's codec the cache writes S2 streams of uncompressed chunks: the S2
    reader (what nats-server's is checked against in tests/test_cluster_s2.py) reads them, and back."""
    from rillet.cluster.s2 import S2Reader
    from rillet.server.ocsp import s2_frame, s2_unframe
    for n in (1, 1000, 65536, 140000):
        raw = os.urandom(n)
        assert S2Reader().feed(s2_frame(raw)) == raw
        assert s2_unframe(s2_frame(raw)) == raw
    with pytest.raises(ValueError):
        s2_unframe(s2_frame(b"abc")[:-1])
