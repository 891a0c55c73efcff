"""The certificates a TLS server presents: exactly those of its cert_file, as nats-server, even when the
ca_file that signed them is configured (OpenSSL would otherwise complete the chain from it). A client that
does not trust the CA sees "unable to verify the first certificate" / "unable to get local issuer
certificate", not "self-signed certificate in certificate chain" (nats.js's transport-node tls_test
"available connects with or without" checks the text)."""
from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl

import pytest

from tests.helpers import GO, serve_config

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

SELF_SIGNED_IN_CHAIN = 19  # X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN
LEAF_ONLY = (20, 21)  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE


def _issue(cn, key, issuer, issuer_key, ca=False, sans=()):
    now = datetime.datetime.now(datetime.timezone.utc)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(issuer or name).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
         .not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("chain")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("chain test CA", ca_key, None, ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = _issue("localhost", key, ca.subject, ca_key,
                  sans=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    out = {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server-key.pem"}
    out["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    out["cert"].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    out["key"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return {k: str(v) for k, v in out.items()}


def _addr(srv):
    return (srv.host or "127.0.0.1", srv.port) if GO else srv.addr


def _verify_code(addr, cafile=None) -> int | None:
    """Read INFO, upgrade to TLS with a client that trusts only ``cafile`` (nothing when None); the
    verification error code, None when the handshake succeeded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    if cafile:
        ctx.load_verify_locations(cafile=cafile)
    with socket.create_connection(addr, timeout=5) as raw:
        buf = b""
        while b"\r\n" not in buf:
            chunk = raw.recv(4096)
            assert chunk, "closed before INFO"
            buf += chunk
        assert buf.startswith(b"INFO "), buf
        try:
            with ctx.wrap_socket(raw) as tls:
                tls.do_handshake()
                return None
        except ssl.SSLCertVerificationError as e:
            return e.verify_code


@pytest.mark.parametrize("extra", ["", "  verify: true\n", "allow_non_tls: true\n"])
async def test_server_presents_only_its_cert_file(files, extra):
    tls_extra, top = (extra, "") if extra.startswith("  ") else ("", extra)
    conf = (f'listen: 127.0.0.1:-1\n{top}tls {{\n  cert_file: "{files["cert"]}"\n  key_file: "{files["key"]}"\n'
            f'  ca_file: "{files["ca"]}"\n{tls_extra}}}\n')
    async with serve_config(conf) as srv:
        loop = asyncio.get_running_loop()
        code = await loop.run_in_executor(None, _verify_code, _addr(srv))
        assert code != SELF_SIGNED_IN_CHAIN, "the server sent the CA along with its certificate"
        assert code in LEAF_ONLY, code
        if not tls_extra:  # (with verify the server wants a client certificate; this client has none)
            assert await loop.run_in_executor(None, _verify_code, _addr(srv), files["ca"]) is None
