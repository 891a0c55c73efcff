"""The jetstream data source's remaining credential options against Rillet and the Go nats-server: an nkey
seed, a .creds file (operator mode), and TLS with a CA and a client certificate. Each batch read succeeds with the
right credential and ends quickly with a clear error with a wrong one (never a hang)."""
from __future__ import annotations

import datetime
import ipaddress
import ssl
import time

import nats
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from nats.js.api import StreamConfig

from rillet import jwt as J
from spark_support import JSServer, run

UNLIMITED = {"subs": -1, "conn": -1, "payload": -1, "data": -1, "imports": -1, "exports": -1, "wildcards": True}
JS_LIMITS = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def _read(spark, url, stream, **opts):
    r = spark.read.format("jetstream").option("servers", url).option("stream", stream)
    for k, v in opts.items():
        r = r.option(k, str(v))
    return r.load()


def _server(tmp_path, kind: str, conf: str) -> JSServer:
    path = tmp_path / "server.conf"
    path.write_text(conf)
    return JSServer(kind, ("-c", str(path)))


def _check(spark, srv: JSServer, name: str, connect_kw: dict, good: dict, bads: list[tuple[dict, str | tuple]]) -> None:
    """Three messages written with nats-py (``connect_kw``) are read back with the ``good`` options; each of
    ``bads`` (options, expected reason or reasons) fails the query at start with the data source's connect error, within
    a few seconds."""
    async def setup():
        nc = await nats.connect(srv.url, allow_reconnect=False, **connect_kw)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name}.>"]))
        for i in range(3):
            await js.publish(f"{name}.a", f"m{i}".encode())
        await nc.close()
    run(setup())
    rows = _read(spark, srv.url, name, **good).select("seq", "data").collect()
    assert [(r.seq, bytes(r.data)) for r in rows] == [(1, b"m0"), (2, b"m1"), (3, b"m2")]
    for bad, reason in bads:
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            _read(spark, srv.url, name, connect_timeout=2, **bad).collect()
        assert "JetStreamSparkError: cannot connect to NATS at" in str(e.value), (bad, str(e.value)[-1500:])
        reasons = (reason,) if isinstance(reason, str) else reason
        assert any(r in str(e.value) for r in reasons), (bad, reason, str(e.value)[-1500:])
        # (a Spark query that fails at its start takes 2-5 s here; a loaded CI machine took 17: the bound only
        # tells a refusal at connect from a query retrying until some later timeout)
        assert time.monotonic() - t0 < 30, bad


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_nkey_seed(spark, tmp_path, name, kind):
    kp = J.new_keypair("U")
    seed = kp.seed.decode()
    other = J.new_keypair("U").seed.decode()  # a valid seed whose public key the server does not know
    srv = _server(tmp_path, kind, f"authorization {{ users = [ {{ nkey: {J.public_key(kp)} }} ] }}\n")
    try:
        _check(spark, srv, name, {"nkeys_seed_str": seed}, {"nkey_seed": seed},
               [({"nkey_seed": other}, "Authorization Violation")])
        # a seed file path works as well as the seed itself
        path = tmp_path / "user.nk"
        path.write_text(seed + "\n")
        rows = _read(spark, srv.url, name, nkey_seed=str(path)).collect()
        assert len(rows) == 3
    finally:
        srv.stop()


def _user(acc_kp) -> tuple:
    ukp = J.new_keypair("U")
    claims = {"sub": J.public_key(ukp), "name": "spark",
              "nats": {"type": "user", "subs": -1, "data": -1, "payload": -1}}
    return ukp, J.encode(claims, acc_kp)


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_creds_file_operator_mode(spark, tmp_path, name, kind):
    okp = J.new_keypair("O")
    sys_kp, acc_kp = J.new_keypair("A"), J.new_keypair("A")
    sys_pub, acc_pub = J.public_key(sys_kp), J.public_key(acc_kp)
    sys_jwt = J.encode({"sub": sys_pub, "name": "SYS", "nats": {"type": "account", "limits": UNLIMITED}}, okp)
    acc_jwt = J.encode({"sub": acc_pub, "name": "A",
                        "nats": {"type": "account", "limits": {**UNLIMITED, **JS_LIMITS}}}, okp)
    op_jwt = J.encode({"sub": J.public_key(okp), "name": "OP",
                       "nats": {"type": "operator", "system_account": sys_pub}}, okp)
    srv = _server(tmp_path, kind, "\n".join([
        f"operator: {op_jwt}", "resolver: MEMORY", f"system_account: {sys_pub}",
        "resolver_preload {", f'  {sys_pub}: "{sys_jwt}"', f'  {acc_pub}: "{acc_jwt}"', "}", ""]))

    def creds(label: str, ukp, token: str) -> str:
        p = tmp_path / f"{label}.creds"
        p.write_text(J.format_creds(token, ukp.seed))
        return str(p)

    good = creds("good", *_user(acc_kp))
    stranger = creds("stranger", *_user(J.new_keypair("A")))  # signed by an account the server does not know
    ukp, token = _user(acc_kp)
    wrong_seed = creds("wrong-seed", J.new_keypair("U"), token)  # the JWT with someone else's seed
    try:
        _check(spark, srv, name, {"user_credentials": good}, {"creds": good},
               [({"creds": stranger}, "Authorization Violation"), ({"creds": wrong_seed}, "Authorization Violation"),
                ({"creds": str(tmp_path / "missing.creds")}, "missing.creds")])
    finally:
        srv.stop()


def _dn(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, issuer: str, key, issuer_key, sans=(), ca=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_dn(subject)).issuer_name(_dn(issuer))
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _write(tmp_path, label: str, cert, key=None) -> tuple[str, str]:
    c, k = tmp_path / f"{label}.pem", tmp_path / f"{label}-key.pem"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
    return str(c), str(k)


def _pki(tmp_path, label: str, with_server: bool) -> dict:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    out = {"ca": _write(tmp_path, f"{label}-ca", _cert(f"{label} CA", f"{label} CA", ca_key, ca_key, ca=True))[0]}
    if with_server:
        skey = ec.generate_private_key(ec.SECP256R1())
        out["server"] = _write(tmp_path, f"{label}-server", _cert(
            "localhost", f"{label} CA", skey, ca_key,
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), skey)
    ckey = ec.generate_private_key(ec.SECP256R1())
    out["client"] = _write(tmp_path, f"{label}-client", _cert("spark", f"{label} CA", ckey, ca_key), ckey)
    return out


@pytest.mark.parametrize("kind", ["rillet", "go"])
def test_tls_with_ca_and_client_certificate(spark, tmp_path, name, kind):
    pki = _pki(tmp_path, "good", with_server=True)
    rogue = _pki(tmp_path, "rogue", with_server=False)  # a client certificate from a CA the server does not trust
    (cert, key), ca = pki["server"], pki["ca"]
    # a rejected client certificate shows as the server resetting or closing the connection (which one the
    # client sees first varies); the error names the TLS options
    rejected = "TLS handshake failed: check options 'tls_ca', 'tls_cert' and 'tls_key'"
    srv = _server(tmp_path, kind,
                  f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{ca}", verify: true }}\n')
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(*pki["client"])
    good = {"tls_ca": ca, "tls_cert": pki["client"][0], "tls_key": pki["client"][1]}
    try:
        _check(spark, srv, name, {"tls": ctx}, good, [
            ({"tls_ca": ca}, rejected),                                          # no client certificate
            ({"tls_ca": ca, "tls_cert": rogue["client"][0], "tls_key": rogue["client"][1]}, rejected),  # untrusted
            ({**good, "tls_ca": rogue["ca"]}, ("CERTIFICATE_VERIFY_FAILED", rejected)),  # server's cert untrusted
        ])
    finally:
        srv.stop()
