"""tls { verify_and_map: true }: users named by the client certificate (email / DNS SAN, subject DN)."""
import datetime
import ssl

import nats
import pytest
from nats.errors import Error as NatsError

from tests.helpers import serve_config

x509 = pytest.importorskip("cryptography.x509")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402


def _name(*pairs):
    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME}
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in pairs])


def _cert(subject, issuer, key, issuer_key, sans=(), ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(key.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
         .not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(tmp_path, name, cert, key):
    c = tmp_path / f"{name}.pem"
    k = tmp_path / f"{name}-key.pem"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return str(c), str(k)


@pytest.fixture
def pki(tmp_path):
    import ipaddress
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(("CN", "Test CA"))
    ca = _cert(ca_name, ca_name, ca_key, ca_key, ca=True)
    out = {"ca": _write(tmp_path, "ca", ca, ca_key)[0]}
    skey = ec.generate_private_key(ec.SECP256R1())
    out["server"] = _write(tmp_path, "server", _cert(_name(("CN", "localhost")), ca_name, skey, ca_key, [
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), skey)
    clients = {
        "alice": (_name(("CN", "alice")), [x509.RFC822Name("alice@example.com")]),
        "bob": (_name(("O", "Rillet"), ("CN", "bob")), []),
        "carol": (_name(("O", "Rillet"), ("CN", "carol")), []),
        "dave": (_name(("CN", "dave")), [x509.DNSName("dave.example.com")]),
        "eve": (_name(("CN", "eve")), []),
    }
    for n, (subj, sans) in clients.items():
        k = ec.generate_private_key(ec.SECP256R1())
        out[n] = _write(tmp_path, n, _cert(subj, ca_name, k, ca_key, sans), k)
    return out


def _ctx(pki, who):
    ctx = ssl.create_default_context(cafile=pki["ca"])
    ctx.load_cert_chain(*pki[who])
    return ctx


async def test_verify_and_map(pki):
    cert, key = pki["server"]
    conf = f"""
listen: 127.0.0.1:-1
tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki['ca']}", verify_and_map: true }}
authorization {{
  users [
    {{ user: "alice@example.com", permissions: {{ publish: "alice.>" }} }}
    {{ user: "CN=bob,O=Rillet" }}
    {{ user: "O=Rillet,CN=carol" }}
    {{ user: "dave.example.com" }}
  ]
}}
"""
    async with serve_config(conf) as srv:
        url = srv.client_url.replace("nats://", "tls://")
        errs = []

        async def ecb(e):
            errs.append(str(e))
        alice = await nats.connect(url, tls=_ctx(pki, "alice"), allow_reconnect=False, error_cb=ecb)
        await alice.publish("bob.x", b"no")
        await alice.flush()
        for who in ("bob", "carol", "dave"):
            nc = await nats.connect(url, tls=_ctx(pki, who), allow_reconnect=False)
            await nc.flush()
            await nc.close()
        with pytest.raises(NatsError):
            nc = await nats.connect(url, tls=_ctx(pki, "eve"), allow_reconnect=False, max_reconnect_attempts=0)
            await nc.close()
        assert any('publish to "bob.x"' in e.lower() for e in errs)
        await alice.close()
