"""tls {} options that change who may connect and how: pinned_certs, cipher_suites, curve_preferences,
min_version, handshake_first (true, a fallback delay, auto), connection_rate_limit, a certs list chosen by SNI;
configuration errors with file:line:col (OCSP is in tests/test_ocsp.py), compared with nats-server -t where it agrees."""
from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import shutil
import ssl
import subprocess

import nats
import pytest
from nats.errors import Error as NatsError

from tests.helpers import GO, log_text, serve_config, wait_log

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

from rillet.config import ConfigError, load_string  # noqa: E402
from rillet.config.tls_names import GO_CIPHER_SUITES  # noqa: E402
from rillet.server.tls import pin_of  # noqa: E402

HAVE_GO = shutil.which("nats-server") is not None


# ---- certificates ----------------------------------------------------------------------------------------

def _cert(cn, key, issuer_name, issuer_key, sans=(), ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer_name or name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(tmp_path, name, cert, key):
    c, k = tmp_path / f"{name}.pem", tmp_path / f"{name}-key.pem"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return str(c), str(k)


def _spki_pin(cert):
    der = cert.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("Test CA", ca_key, None, ca_key, ca=True)
    out = {"ca": _write(tmp, "ca", ca, ca_key)[0]}
    skey = ec.generate_private_key(ec.SECP256R1())
    out["server"] = _write(tmp, "server", _cert("localhost", skey, ca.subject, ca_key, [
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), skey)
    for who in ("alice", "bob"):
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert(who, k, ca.subject, ca_key)
        out[who] = _write(tmp, who, c, k)
        out[f"{who}_pin"] = _spki_pin(c)
        out[f"{who}_der"] = c.public_bytes(serialization.Encoding.DER)
    return out


def _ctx(pki, who=None, max_version=None, ciphers=None):
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if who:
        ctx.load_cert_chain(*pki[who])
    if max_version is not None:
        ctx.maximum_version = max_version
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def _tls_block(pki, extra=""):
    cert, key = pki["server"]
    return f'tls {{\n  cert_file: "{cert}"\n  key_file: "{key}"\n  ca_file: "{pki["ca"]}"\n{extra}\n}}\n'


def _url(srv):
    host, port = (srv.host or "127.0.0.1", srv.port) if GO else srv.addr
    return f"tls://{host}:{port}"


async def _connects(srv, ctx, **kw) -> bool:
    try:
        nc = await nats.connect(_url(srv), tls=ctx, allow_reconnect=False, max_reconnect_attempts=0,
                                connect_timeout=2, **kw)
    except (NatsError, OSError, ssl.SSLError, asyncio.TimeoutError):
        return False
    try:
        if not nc.is_connected:  # (nats.py returns a closed client when the server hangs up in the handshake)
            return False
        await nc.flush(timeout=2)
        return True
    except (NatsError, asyncio.TimeoutError):
        return False
    finally:
        await nc.close()


# ---- pure parts ------------------------------------------------------------------------------------------

def test_pin_is_sha256_of_subject_public_key_info(pki):
    for who in ("alice", "bob"):
        assert pin_of(pki[f"{who}_der"]) == pki[f"{who}_pin"]
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = _cert("rsa", key, None, key)
    assert pin_of(cert.public_bytes(serialization.Encoding.DER)) == _spki_pin(cert)
    # not the whole certificate's fingerprint
    assert pin_of(pki["alice_der"]) != hashlib.sha256(pki["alice_der"]).hexdigest()


@pytest.mark.skipif(not HAVE_GO, reason="nats-server not on PATH")
def test_cipher_names_classified_as_nats_server_does(tmp_path):
    """Every name we know is known to nats-server, with the same insecure flag; a near-miss is unknown."""
    path = tmp_path / "c.conf"
    names = list(GO_CIPHER_SUITES) + ["TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", "TLS_FALLBACK_SCSV"]
    for name in names:
        path.write_text(f'tls {{\n  cert_file: "/nonexistent.pem"\n  key_file: "/nonexistent.pem"\n'
                        f'  cipher_suites: [ {name} ]\n}}\n')
        out = subprocess.run(["nats-server", "-t", "-c", str(path)], capture_output=True, text=True,
                             timeout=10)
        text = out.stdout + out.stderr
        if name not in GO_CIPHER_SUITES:
            assert f"unrecognized cipher {name}" in text
        elif GO_CIPHER_SUITES[name][1]:
            assert "insecure cipher suites configured" in text, name
        else:
            assert "unrecognized" not in text and "insecure" not in text, (name, text)


# ---- config errors ---------------------------------------------------------------------------------------

def _tls(body):
    return f'listen: 127.0.0.1:-1\ntls {{\n  cert_file: "c.pem"\n  key_file: "k.pem"\n  {body}\n}}\n'


# (id, text, (line, col), message, nats-server says the same)
CASES = [
    ("cipher_unknown", _tls("cipher_suites: [ TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305 ]"), (5, 20),
     "unrecognized cipher TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", True),
    ("cipher_empty", _tls("cipher_suites: []"), (5, 3), "error parsing tls config, 'cipher_suites' cannot be empty",
     True),
    ("cipher_insecure", _tls("cipher_suites: [ TLS_RSA_WITH_AES_128_CBC_SHA, TLS_RSA_WITH_RC4_128_SHA ]"), (2, 1),
     "insecure cipher suites configured without 'allow_insecure_cipher_suites' option set: "
     "TLS_RSA_WITH_AES_128_CBC_SHA, TLS_RSA_WITH_RC4_128_SHA", True),
    ("cipher_not_in_openssl", _tls("cipher_suites: [ TLS_RSA_WITH_RC4_128_SHA ]\n  allow_insecure_cipher_suites: true"),
     (2, 1), "error parsing tls config, cipher suite TLS_RSA_WITH_RC4_128_SHA is not available in this "
     "server's TLS library", False),
    ("curve_unknown", _tls("curve_preferences: [ X25519, P256 ]"), (5, 32), "unrecognized curve preference P256",
     True),
    ("curve_mlkem", _tls("curve_preferences: [ X25519MLKEM768 ]"), (5, 24),
     "curve preference X25519MLKEM768 is not supported by this server's TLS library", False),
    ("min_version_1_1", _tls('min_version: "1.1"'), (5, 3),
     "error parsing tls config: unsupported TLS version: TLS 1.1", True),
    ("min_version_1_0", _tls('min_version: "1.0"'), (5, 3),
     "error parsing tls config: unsupported TLS version: TLS 1.0", True),
    ("min_version_garbage", _tls('min_version: "2.0"'), (5, 3), "error parsing tls config: unknown version: 2.0",
     True),
    ("min_version_number", _tls("min_version: 1.3"), (5, 3),
     "error parsing tls config: 'min_version' wrong type: 1.3", True),
    ("handshake_first_bad", _tls('handshake_first: "soon"'), (5, 3),
     'field "handshake_first"\'s value "soon" is invalid', True),
    ("handshake_first_type", _tls("handshake_first: 5"), (5, 3),
     'field "handshake_first" should be a boolean or a string, got int64', True),
    ("rate_limit_type", _tls('connection_rate_limit: "3"'), (5, 3),
     "error parsing tls config, 'connection_rate_limit' wrong type", True),
    ("cert_store_os", _tls('cert_store: "WindowsCurrentUser"'), (5, 3),
     "cert_store not compatible with current operating system", True),
    ("cert_store_unknown", _tls('cert_store: "Keychain"'), (5, 3), "cert store type not implemented", True),
    ("pinned_bad", _tls('pinned_certs: ["abc"]'), (5, 3),
     "error parsing tls config, 'pinned_certs' key abc does not look like hex-encoded sha256 of DER encoded "
     "SubjectPublicKeyInfo", False),  # (nats-server names the element's position)
    ("verify_known_urls", _tls("verify_cert_and_check_known_urls: true"), (5, 3),
     "verify_cert_and_check_known_urls not supported in this context", True),
    # accepted by nats-server, refused here (they would do nothing)
    ("cert_match_by", _tls('cert_match_by: "Subject"'), (5, 3),
     "error parsing tls config, 'cert_match_by' is not supported", False),
    # a certs list (several certificates, chosen by SNI): checked as nats-server checks it
    ("certs_with_cert_file", _tls('certs: [ { cert_file: "a", key_file: "b" } ]'), (2, 1),
     "error parsing tls config, cannot combine 'cert_file' option with 'certs' option", True),
    ("certs_missing_key", 'tls {\n  certs: [ { cert_file: "a" } ]\n}\n', (2, 14),
     "error parsing certificates config: both 'cert_file' and 'cert_key' options are required", True),
    ("certs_unknown_field", 'tls {\n  certs: [ { cert_file: "a", key_file: "b", bogus: "x" } ]\n}\n', (2, 45),
     'error parsing tls certs config, unknown field "bogus"', True),
    ("certs_field_type", 'tls {\n  certs: [ { cert_file: 5, key_file: "b" } ]\n}\n', (2, 14),
     "error parsing certificates config: unsupported type int64", True),
    ("certs_not_a_list", 'tls {\n  certs: { cert_file: "a" }\n}\n', (2, 3),
     "error parsing certificates config: unsupported type map[string]interface {}", True),
    ("certs_item_type", 'tls {\n  certs: [ "x" ]\n}\n', (2, 13),
     "error parsing certificates config: unsupported type string", True),
    ("websocket_handshake_first",
     'websocket {\n  port: -1\n  tls {\n    cert_file: "c.pem"\n    key_file: "k.pem"\n    handshake_first: true\n'
     '  }\n}\n', (6, 5), "error parsing tls config, 'handshake_first' is not supported in the websocket tls block",
     False),
    ("websocket_rate_limit",
     'websocket {\n  port: -1\n  tls {\n    cert_file: "c.pem"\n    key_file: "k.pem"\n'
     '    connection_rate_limit: 5\n  }\n}\n', (6, 5),
     "error parsing tls config, 'connection_rate_limit' is not supported in the websocket tls block", False),
    ("websocket_timeout",
     'websocket {\n  port: -1\n  tls {\n    cert_file: "c.pem"\n    key_file: "k.pem"\n    timeout: 3\n  }\n}\n',
     (6, 5), "error parsing tls config, 'timeout' is not supported in the websocket tls block", False),
]


@pytest.mark.parametrize("text,pos,msg,same", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tls_config_error(text, pos, msg, same):
    with pytest.raises(ConfigError) as info:
        load_string(text, "o.conf")
    assert str(info.value).startswith(f"o.conf:{pos[0]}:{pos[1]}: {msg}")


@pytest.mark.skipif(not HAVE_GO, reason="nats-server not on PATH")
@pytest.mark.parametrize("text,pos,msg", [c[1:4] for c in CASES if c[4]], ids=[c[0] for c in CASES if c[4]])
def test_tls_config_error_as_nats_server(tmp_path, text, pos, msg):
    path = tmp_path / "o.conf"
    path.write_text(text)
    out = subprocess.run(["nats-server", "-t", "-c", str(path)], capture_output=True, text=True, timeout=10)
    assert out.returncode != 0
    assert f"{path}:{pos[0]}:{pos[1]}: {msg}" in out.stdout + out.stderr


def test_ocsp_off_is_accepted():
    load_string("ocsp: false\nocsp_cache: false\n" + _tls("ocsp_peer: false"), "o.conf")


def test_good_tls_options_load():
    o = load_string(_tls("cipher_suites: [ TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256 ]\n"
                         "  curve_preferences: [ CurveP384 ]\n  min_version: \"1.3\"\n"
                         "  handshake_first: auto\n  connection_rate_limit: 7\n  ocsp_peer: false"), "o.conf")
    t = o.tls
    assert t.ciphers == ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"]
    assert (t.curve_preferences, t.min_version, t.rate_limit) == (["CurveP384"], "1.3", 7)
    assert t.handshake_first and t.handshake_first_fallback == 0.05  # nats-server's auto delay: 50ms
    o = load_string(_tls('handshake_first: "300ms"'), "o.conf")
    assert o.tls.handshake_first and o.tls.handshake_first_fallback == pytest.approx(0.3)


# ---- servers ---------------------------------------------------------------------------------------------

async def test_pinned_cert_accepted_unpinned_refused(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, f'  verify: true\n  pinned_certs: ["{pki["alice_pin"]}"]')
    async with serve_config(conf) as srv:
        assert await _connects(srv, _ctx(pki, "alice"))
        assert not await _connects(srv, _ctx(pki, "bob"))
        await wait_log(srv, r"TLS handshake error: certificate not pinned")
        if not GO:
            assert [cc.info.get("reason") for cc in srv.closed_clients][-1] == "TLS Handshake Failure"


async def test_pinned_cert_without_client_certificate_refused(pki):
    """verify off: the server asks for no certificate, so a pinned set lets nobody in (as nats-server)."""
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, f'  pinned_certs: ["{pki["alice_pin"]}"]')
    async with serve_config(conf) as srv:
        assert not await _connects(srv, _ctx(pki, "alice"))
        await wait_log(srv, r"certificate not pinned")


async def test_pinned_cert_tls_first(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(
        pki, f'  verify: true\n  handshake_first: true\n  pinned_certs: ["{pki["bob_pin"]}"]')
    async with serve_config(conf) as srv:
        assert await _connects(srv, _ctx(pki, "bob"), tls_handshake_first=True)
        assert not await _connects(srv, _ctx(pki, "alice"), tls_handshake_first=True)
        await wait_log(srv, r"TLS handshake error: certificate not pinned")


async def test_pinned_certs_reload_disconnects_unpinned(pki, tmp_path):
    """A reload that unpins a connected client's certificate closes it (nats-server: recheckPinnedCerts)."""
    import io
    import signal
    from rillet.config.flags import parse_command_line
    from rillet.app.embed import run_server
    from rillet.server.sysservices import reload_from_file
    from tests.helpers import ServerProcess, _rillet_logger
    path = tmp_path / "pin.conf"
    tmpl = "listen: 127.0.0.1:-1\n" + _tls_block(pki, '  verify: true\n  pinned_certs: ["%s"]')
    path.write_text(tmpl % pki["alice_pin"])
    async with contextlib.AsyncExitStack() as stack:
        if GO:
            srv = ServerProcess("-c", str(path), command=["nats-server"])
            stack.callback(srv.stop)
            await asyncio.get_running_loop().run_in_executor(None, srv.wait_ready)
            reload = lambda: srv.send_signal(signal.SIGHUP)  # noqa: E731
        else:
            opts = parse_command_line(["-c", str(path)]).options
            buf = io.StringIO()
            srv = await stack.enter_async_context(run_server(opts, log=_rillet_logger(opts, buf)))
            srv._test_log = buf
            reload = lambda: reload_from_file(srv)  # noqa: E731
        closed = asyncio.Event()

        async def on_closed():
            closed.set()
        alice = await nats.connect(_url(srv), tls=_ctx(pki, "alice"), allow_reconnect=False,
                                   closed_cb=on_closed)
        await alice.flush()
        path.write_text(tmpl % pki["bob_pin"])
        reload()
        await asyncio.wait_for(closed.wait(), 3)
        await wait_log(srv, "Disconnect 1 clients due to pinned certs reload")
        assert await _connects(srv, _ctx(pki, "bob"))
        assert not await _connects(srv, _ctx(pki, "alice"))


async def test_cipher_suites_restrict_tls12(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  cipher_suites: [ TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 ]")
    tls12 = ssl.TLSVersion.TLSv1_2
    async with serve_config(conf) as srv:
        assert await _connects(srv, _ctx(pki, max_version=tls12, ciphers="ECDHE-ECDSA-AES128-GCM-SHA256"))
        assert not await _connects(srv, _ctx(pki, max_version=tls12, ciphers="ECDHE-ECDSA-AES256-GCM-SHA384"))
        assert not await _connects(srv, _ctx(pki, max_version=tls12, ciphers="ECDHE-ECDSA-CHACHA20-POLY1305"))
        assert await _connects(srv, _ctx(pki))  # TLS 1.3 suites are not restricted (as in Go)


async def test_only_tls13_suites_means_tls13_only(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  cipher_suites: [ TLS_AES_128_GCM_SHA256 ]")
    async with serve_config(conf) as srv:
        assert not await _connects(srv, _ctx(pki, max_version=ssl.TLSVersion.TLSv1_2))
        assert await _connects(srv, _ctx(pki))


async def test_min_version_13_refuses_tls12_client(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, '  min_version: "1.3"')
    async with serve_config(conf) as srv:
        assert not await _connects(srv, _ctx(pki, max_version=ssl.TLSVersion.TLSv1_2))
        assert await _connects(srv, _ctx(pki))


async def test_curve_preference(pki):
    """One curve allowed: a client that offers only another group cannot agree on a key exchange."""
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  curve_preferences: [ CurveP384 ]")
    async with serve_config(conf) as srv:
        assert await _connects(srv, _ctx(pki))
        ctx = _ctx(pki)
        ctx.set_ecdh_curve("secp384r1")
        assert await _connects(srv, ctx)
        ctx = _ctx(pki)
        ctx.set_ecdh_curve("X25519")
        assert not await _connects(srv, ctx)


@pytest.mark.parametrize("first", ['"300ms"', "auto"])
async def test_handshake_first_with_fallback_serves_both_kinds(pki, first):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, f"  handshake_first: {first}")
    async with serve_config(conf) as srv:
        for _ in range(3):
            assert await _connects(srv, _ctx(pki), tls_handshake_first=True)
            assert await _connects(srv, _ctx(pki))  # INFO first: waits out the delay, then upgrades
        assert "TLS handshake error" not in log_text(srv)


async def test_handshake_first_without_fallback_needs_tls_first(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  handshake_first: true\n  timeout: 0.5")
    async with serve_config(conf) as srv:
        await wait_log(srv, r'Clients that are not using "TLS Handshake First" option will fail to connect')
        assert await _connects(srv, _ctx(pki), tls_handshake_first=True)
        assert not await _connects(srv, _ctx(pki))


async def test_connection_rate_limit(pki):
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  connection_rate_limit: 2")
    async with serve_config(conf) as srv:
        results = [await _connects(srv, _ctx(pki)) for _ in range(4)]
        assert results[:2] == [True, True] and not any(results[2:])
        await wait_log(srv, r"Rejected \d+ connections due to TLS rate limiting", timeout=3)


async def test_websocket_pinned_certs(pki):
    """pinned_certs in websocket { tls {} } is enforced at connect (nats-server only checks it on reload)."""
    cert, key = pki["server"]
    conf = (f'listen: 127.0.0.1:-1\nwebsocket {{\n  listen: "127.0.0.1:-1"\n  tls {{\n    cert_file: "{cert}"\n'
            f'    key_file: "{key}"\n    ca_file: "{pki["ca"]}"\n    verify: true\n'
            f'    pinned_certs: ["{pki["alice_pin"]}"]\n  }}\n}}\n')
    if GO:
        pytest.skip("nats-server does not check websocket pinned_certs at connect")
    async with serve_config(conf) as srv:
        port = srv.websocket_addr[1]
        nc = await nats.connect(f"wss://127.0.0.1:{port}", tls=_ctx(pki, "alice"), allow_reconnect=False)
        await nc.flush(timeout=2)
        await nc.close()
        # (nats.py retries a refused wss connection on its own: the refusal is seen on a raw connection)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=_ctx(pki, "bob"))
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        try:
            data = await asyncio.wait_for(reader.read(100), 2)
        except (ConnectionError, ssl.SSLError):
            data = b""
        assert data == b""
        writer.close()
        await wait_log(srv, r"TLS handshake error: certificate not pinned")


async def test_certs_list_chosen_by_sni(tmp_path):
    """tls { certs: [...] }: the certificate whose names match the client's SNI, else the first (as nats-server,
    which gives Go's TLS the whole list)."""
    files = []
    for cn, sans in (("first.example", ["first.example", "localhost"]), ("second.example", ["*.second.example"])):
        k = ec.generate_private_key(ec.SECP256R1())
        files.append(_write(tmp_path, cn, _cert(cn, k, None, k, [x509.DNSName(n) for n in sans]), k))
    conf = ("listen: 127.0.0.1:-1\ntls {\n  certs: [\n"
            + "".join(f'    {{ cert_file: "{c}", key_file: "{k}" }}\n' for c, k in files) + "  ]\n}\n")

    def subject_for(host: str, port: int, sni: str | None) -> str:
        import socket
        with socket.create_connection((host, port), timeout=5) as s:
            buf = b""
            while b"\r\n" not in buf:
                buf += s.recv(4096)
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            with ctx.wrap_socket(s, server_hostname=sni) as t:
                der = t.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value

    async with serve_config(conf) as srv:
        host, port = (srv.host or "127.0.0.1", srv.port) if GO else srv.addr
        loop = asyncio.get_running_loop()
        got = {sni: await loop.run_in_executor(None, subject_for, host, port, sni)
               for sni in ("localhost", "a.second.example", "second.example", "nomatch.example", None)}
    assert got == {"localhost": "first.example", "a.second.example": "second.example",
                   "second.example": "first.example", "nomatch.example": "first.example", None: "first.example"}


async def test_curve_preferences_several(pki):
    """Several curves: a client offering any of them agrees on a key exchange, one offering only another does
    not (as nats-server)."""
    conf = "listen: 127.0.0.1:-1\n" + _tls_block(pki, "  curve_preferences: [ CurveP384, CurveP521 ]")
    async with serve_config(conf) as srv:
        for group, ok in (("secp384r1", True), ("secp521r1", True), ("X25519", False), ("prime256v1", False)):
            ctx = _ctx(pki)
            ctx.set_ecdh_curve(group)
            assert await _connects(srv, ctx) is ok, group
