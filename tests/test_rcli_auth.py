"""The connection options with authentication: token, nkey seed file, TLS client certificates."""
from __future__ import annotations

import os

import pytest

from tests.helpers import ServerProcess, free_port
from tests.test_rcli_support import Cli


def _server(tmp_path, text: str) -> ServerProcess:
    conf = tmp_path / "auth.conf"
    conf.write_text(f"listen: 127.0.0.1:{free_port()}\n" + text)
    return ServerProcess("-c", str(conf)).wait_ready()


def test_token_and_nkey(tmp_path):
    import nkeys
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(seed).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed + b"\n")
    srv = _server(tmp_path, f'authorization {{ users: [ {{nkey: "{public}"}} ] }}\n')
    try:
        cli = Cli(srv.client_url, str(tmp_path / "cfg"))
        assert "Published 2 bytes" in cli.ok("pub", "x", "hi", "--nkey", str(seed_file))
        assert cli.fails("pub", "x", "hi").endswith("Authorization Violation")
        assert cli.fails("pub", "x", "hi", "--nkey", str(tmp_path / "none.nk")) == \
            f"nkey seed file {tmp_path / 'none.nk'} does not exist"
        # NATS_NKEY and a context carry it too
        cli.ok("pub", "x", "hi", env={"NATS_NKEY": str(seed_file)})
        cli.ok("context", "add", "nk", "--nkey", str(seed_file), "--server", srv.client_url)
        cli.ok("pub", "x", "hi", "--context", "nk", env={"NATS_URL": ""})
    finally:
        srv.stop()
    srv = _server(tmp_path, 'authorization { token: "s3cret" }\n')
    try:
        cli = Cli(srv.client_url, str(tmp_path / "cfg2"))
        cli.ok("pub", "x", "hi", "--token", "s3cret")
        cli.ok("pub", "x", "hi", "--user", "s3cret")  # like the nats CLI: a user without password is a token
        cli.ok("pub", "x", "hi", env={"NATS_TOKEN": "s3cret"})
        assert cli.fails("pub", "x", "hi", "--token", "wrong").endswith("Authorization Violation")
    finally:
        srv.stop()


def test_tls_client_certificates(tmp_path):
    pytest.importorskip("cryptography")
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.test_tls_map import _cert, _name, _write
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(("CN", "CLI CA"))
    ca_file = _write(tmp_path, "ca", _cert(ca_name, ca_name, ca_key, ca_key, ca=True), ca_key)[0]
    skey = ec.generate_private_key(ec.SECP256R1())
    scert, skeyf = _write(tmp_path, "server", _cert(_name(("CN", "localhost")), ca_name, skey, ca_key, [
        x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), skey)
    ckey = ec.generate_private_key(ec.SECP256R1())
    ccert, ckeyf = _write(tmp_path, "client", _cert(_name(("CN", "cli")), ca_name, ckey, ca_key), ckey)
    srv = _server(tmp_path, f'tls {{ cert_file: "{scert}", key_file: "{skeyf}", ca_file: "{ca_file}", verify: true }}\n')
    try:
        cli = Cli(srv.client_url.replace("nats://", "tls://"), str(tmp_path / "cfg"))
        out = cli.ok("pub", "x", "over tls", "--tlscert", ccert, "--tlskey", ckeyf, "--tlsca", ca_file)
        assert "Published 8 bytes" in out
        cli.ok("pub", "x", "env", env={"NATS_CERT": ccert, "NATS_KEY": ckeyf, "NATS_CA": ca_file})
        # TLS 1.3: the client may finish its handshake before the server refuses the missing certificate
        err = cli.fails("pub", "x", "no client cert", "--tlsca", ca_file)
        assert err.startswith("could not connect to tls://") or err == "connection closed", err
        err = cli.fails("pub", "x", "y", "--tlscert", str(tmp_path / "none.pem"), "--tlsca", ca_file)
        assert err.startswith(f"could not load the TLS certificate {tmp_path / 'none.pem'}")
    finally:
        srv.stop()
