"""TLS on gateways (rillet.cluster.gateway), as nats-server: ``gateway { tls {} }`` and per-remote
``gateways [{ name, urls, tls {} }]``; TLS from the first byte, the peer's certificate always verified.

Rillet super-clusters over TLS, a Rillet cluster and a Go cluster over TLS, a wrong CA and an unpinned key
refused with nats-server's log words, and the config and reload rules.
"""
from __future__ import annotations

import asyncio
import contextlib
import io
import shutil

import pytest

from helpers import free_port
from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from rillet.monitor.endpoints import gatewayz
from rillet.server.logging import Logger
from rillet.server.server import Server
from rillet.app.compose import build_server
from test_cluster_gateways import Inbox, _interest, _until, clients, go_server

x509 = pytest.importorskip("cryptography.x509")
GO_SERVER = shutil.which("nats-server")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    import ipaddress

    from cryptography.hazmat.primitives.asymmetric import ec
    from test_tls_options import _cert, _spki_pin, _write
    tmp = tmp_path_factory.mktemp("gw_pki")
    out = {}
    for ca_name in ("ca", "other_ca"):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert(ca_name, ca_key, None, ca_key, ca=True)
        out[ca_name] = _write(tmp, ca_name, ca, ca_key)[0]
        k = ec.generate_private_key(ec.SECP256R1())
        c = _cert("localhost", k, ca.subject, ca_key, [x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        out[f"{ca_name}_node"] = _write(tmp, f"{ca_name}_node", c, k)
        out[f"{ca_name}_pin"] = _spki_pin(c)
        # a certificate for a name only (no IP): an IP URL is checked under a host name of the remote
        k2 = ec.generate_private_key(ec.SECP256R1())
        c2 = _cert("localhost", k2, ca.subject, ca_key, [x509.DNSName("localhost")])
        out[f"{ca_name}_nameonly"] = _write(tmp, f"{ca_name}_nameonly", c2, k2)
    return out


def tls_block(pki, who="ca", ca="ca", extra=""):
    cert, key = pki[f"{who}_node"]
    return f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki[ca]}"\n {extra} }}'


def gw_server(name: str, cluster: str, gw_port: int, remotes: str = "", tls: str = "", buf=None,
              cl_port: int = 0, routes: str = "", extra: str = "") -> Server:
    """A Rillet server from a config text (cluster block when ``cl_port``)."""
    text = f"server_name: {name}\nlisten: 127.0.0.1:-1\n{extra}\n"
    if cl_port:
        text += f"cluster {{ name: {cluster}, listen: 127.0.0.1:{cl_port}, routes: [{routes}] }}\n"
    text += f"gateway {{ name: {cluster}, listen: 127.0.0.1:{gw_port}\n {tls}\n gateways: [{remotes}] }}\n"
    s = build_server(load_string(text), Logger(debug=True, out=buf if buf is not None else io.StringIO()))
    s.gateway.solicit_delay = 0.05
    return s


@contextlib.asynccontextmanager
async def started(*servers):
    try:
        for s in servers:
            await s.start()
        yield servers
    finally:
        for s in reversed(servers):
            await s.shutdown()


def _ssl(c) -> bool:
    return c.transport is not None and c.transport.get_extra_info("ssl_object") is not None


# ==== configuration ==========================================================================================

def test_gateway_tls_parsed(pki):
    o = load_string(f'gateway {{ name: A, port: 1, {tls_block(pki, extra="timeout: 3")}, gateways: ['
                    f'{{name: B, url: "h:1", {tls_block(pki, extra="insecure: true")}}}, {{name: C, url: "h:2"}}] }}')
    g = o.gateway_opts
    assert g.tls is not None and g.tls.ca_file == pki["ca"] and (g.tls.timeout, g.tls_timeout) == (3.0, 3.0)
    assert g.gateways[0].tls.insecure and g.gateways[0].tls_timeout == 0.0  # (not written: the block's)
    assert g.gateways[1].tls is None


# (verify_and_map and verify_cert_and_check_known_urls work: tests/test_route_gateway_cert_auth.py)
@pytest.mark.parametrize("extra, word", [("handshake_first: true", "handshake_first")])
def test_gateway_tls_settings_refused_at_load(pki, extra, word):
    for text in (f"gateway {{ name: A, port: 1\n {tls_block(pki, extra=extra)} }}",
                 f'gateway {{ name: A, port: 1, gateways: [{{name: B, url: "h:1"\n {tls_block(pki, extra=extra)}}}] }}'):
        with pytest.raises(ConfigError) as e:
            load_string(text, "x.conf")
        assert str(e.value).startswith("x.conf:3:") and word in str(e.value)


def test_gateway_tls_certificate_that_cannot_be_loaded_refuses_start(pki):
    o = load_string('gateway { name: A, port: -1, tls { cert_file: "/nonexistent.pem", key_file: "/x.pem" } }')
    with pytest.raises(ValueError, match=r"^<string>:1:29: gateway tls: error parsing X509 certificate/key pair"):
        build_server(o, Logger(out=io.StringIO()))


# ==== Rillet super-clusters over TLS =========================================================================

async def test_super_cluster_over_tls(pki):
    """Clusters A (two servers), B and C, all with the gateway block's TLS; B and C know A only (C by a
    per-remote tls block): every gateway connection, implicit ones too, is TLS, messages and requests cross."""
    p = [free_port() for _ in range(6)]
    a0 = gw_server("a0", "A", p[0], tls=tls_block(pki), cl_port=p[1])
    a1 = gw_server("a1", "A", p[2], tls=tls_block(pki), cl_port=p[3], routes=f"nats://127.0.0.1:{p[1]}")
    b0 = gw_server("b0", "B", p[4], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}', tls=tls_block(pki))
    c0 = gw_server("c0", "C", p[5], tls=tls_block(pki),
                   remotes=f'{{name: A, url: "nats://localhost:{p[0]}"\n {tls_block(pki, extra="timeout: 3")}}}')
    async with started(a0, a1, b0, c0):
        every = (a0, a1, b0, c0)
        await _until(lambda: all(len(s.gateway.out) == 2 for s in every), 10, "every outbound gateway")
        await _until(lambda: sum(len(v) for s in (a0, a1) for v in s.gateway.ins.values()) == 2, 5, "inbound at A")
        for s in every:
            assert all(_ssl(c) for c in s.gateway.conns), s.name
        assert b0.gateway.remotes["C"].implicit  # learnt by gossip, dialled with the block's TLS
        assert a0.gateway.info.tls_required and a0.gateway.info.tls_verify
        z = gatewayz(a0, {})
        conn = z["outbound_gateways"]["B"]["connection"]
        assert conn["tls_version"] in ("1.2", "1.3") and conn["tls_cipher_suite"]
        async with clients([a1.client_url, b0.client_url, c0.client_url]) as (na, nb, nc):
            got = Inbox()
            await nc.subscribe("over.tls", cb=got.cb)

            async def svc(m):
                await m.respond(b"b:" + m.data)
            await nb.subscribe("svc", cb=svc)
            await nc.flush()
            await nb.flush()
            await _until(lambda: _interest(a1, "C", "over.tls") and _interest(a1, "B", "svc"), what="interest")
            await na.publish("over.tls", b"secret")
            r = await na.request("svc", b"1", timeout=2)
            assert r.data == b"b:1"
            await _until(lambda: got.data == [b"secret"], what="message over TLS")


async def test_wrong_ca_refused_with_nats_server_words(pki):
    """B's certificate comes from another CA: neither side accepts the other, in nats-server's words, and the
    dialling side keeps retrying (a restart with the right CA would join)."""
    p = [free_port() for _ in range(2)]
    buf_a, buf_b = io.StringIO(), io.StringIO()
    a = gw_server("a", "A", p[0], tls=tls_block(pki), buf=buf_a)
    b = gw_server("b", "B", p[1], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}',
                  tls=tls_block(pki, who="other_ca", ca="other_ca"), buf=buf_b)
    async with started(a, b):
        await _until(lambda: buf_b.getvalue().count("TLS gateway handshake error") >= 2, 6, "dial side retries")
        assert "Gateway connection closed: TLS Handshake Failure" in buf_b.getvalue()
        assert "certificate verify failed" in buf_b.getvalue()
        assert not a.gateway.ins and not b.gateway.out
        # the server and its clients are unharmed
        async with clients([a.client_url]) as (nc,):
            sub = await nc.subscribe("still.ok")
            await nc.publish("still.ok", b"1")
            assert (await sub.next_msg(1)).data == b"1"


async def test_client_certificate_from_another_ca_refused_by_the_accepting_side(pki):
    """B trusts A's CA but presents a certificate A does not trust: A refuses it (TLS gateway handshake
    error on A's side), no inbound is registered."""
    p = [free_port() for _ in range(2)]
    buf_a = io.StringIO()
    a = gw_server("a", "A", p[0], tls=tls_block(pki), buf=buf_a)
    b = gw_server("b", "B", p[1], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}',
                  tls=tls_block(pki, who="other_ca", ca="ca"))
    async with started(a, b):
        await _until(lambda: "TLS gateway handshake error" in buf_a.getvalue(), 6, "accept side refusal")
        assert "Gateway connection closed: TLS Handshake Failure" in buf_a.getvalue()
        await asyncio.sleep(0.2)
        assert not a.gateway.ins and "A" not in b.gateway.out


async def test_pinned_certs_and_insecure(pki):
    # the accepting side pins a key that is not the peer's
    p = [free_port() for _ in range(2)]
    buf_a = io.StringIO()
    a = gw_server("a", "A", p[0], buf=buf_a, tls=tls_block(pki, extra=f'pinned_certs: ["{pki["other_ca_pin"]}"]'))
    b = gw_server("b", "B", p[1], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}', tls=tls_block(pki))
    async with started(a, b):
        await _until(lambda: "TLS gateway handshake error: certificate not pinned" in buf_a.getvalue(), 6, "pin")
        assert not a.gateway.ins
    # pinned to the right key: up
    p = [free_port() for _ in range(2)]
    a = gw_server("a", "A", p[0], tls=tls_block(pki, extra=f'pinned_certs: ["{pki["ca_pin"]}"]'))
    b = gw_server("b", "B", p[1], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}', tls=tls_block(pki))
    async with started(a, b):
        await _until(lambda: "A" in b.gateway.out and "B" in a.gateway.out, 6, "pinned gateways up")
    # insecure on B's remote: B does not check A's certificate (A still checks B's); warned at start
    p = [free_port() for _ in range(2)]
    buf_b = io.StringIO()
    a = gw_server("a", "A", p[0], tls=tls_block(pki, who="other_ca", ca="ca"))
    b = gw_server("b", "B", p[1], buf=buf_b, tls=tls_block(pki),
                  remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"\n {tls_block(pki, extra="insecure: true")}}}')
    async with started(a, b):
        await _until(lambda: "A" in b.gateway.out, 6, "insecure outbound up")
        assert "TLS certificate chain and hostname of solicited gateways will not be verified" in buf_b.getvalue()


async def test_ip_url_checked_under_the_remotes_host_name(pki):
    """A's certificate names localhost only; B dials A's IP URL and checks it under the host name of A's
    other URL (nats-server's tlsName)."""
    p = [free_port() for _ in range(2)]
    cert, key = pki["ca_nameonly"]
    a_tls = f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}" }}'
    a = gw_server("a", "A", p[0], tls=a_tls)
    b = gw_server("b", "B", p[1], tls=tls_block(pki),
                  remotes=f'{{name: A, urls: ["nats://127.0.0.1:{p[0]}", "nats://localhost:{p[0]}"]}}')
    assert b.gateway.remotes["A"].tls_name == "localhost"
    async with started(a, b):
        for _ in range(3):  # (the URLs are tried in a random order: both must work)
            await _until(lambda: "A" in b.gateway.out, 6, "outbound over TLS")
            b.gateway.out["A"].close("test")
            await _until(lambda: "A" not in b.gateway.out, 2, "closed")


# ==== a Rillet cluster and a Go cluster over TLS ================================================================

@pytest.mark.skipif(GO_SERVER is None, reason="nats-server binary not on PATH")
async def test_tls_gateway_with_a_go_server(pki):
    """Two Rillet servers (cluster A) and a Go server (cluster B) dialling the first one; the second Rillet
    server learns B over its route and dials the Go server with the block's TLS."""
    cport, gport, hport = free_port(), free_port(), free_port()
    p = [free_port() for _ in range(4)]
    a0 = gw_server("a0", "A", p[0], tls=tls_block(pki), cl_port=p[1])
    a1 = gw_server("a1", "A", p[2], tls=tls_block(pki), cl_port=p[3], routes=f"nats://127.0.0.1:{p[1]}")
    async with started(a0, a1):
        await _until(lambda: a0.cluster.servers_connected() == 1, 5, "route")
        conf = (f"port: {cport}\nhttp: 127.0.0.1:{hport}\nserver_name: go-b0\n"
                f"gateway {{ name: B, listen: 127.0.0.1:{gport}\n {tls_block(pki)}\n"
                f'gateways: [{{name: A, url: "nats://127.0.0.1:{p[0]}"}}] }}\n')
        with go_server(conf, [cport, gport, hport]):
            await _until(lambda: all("B" in s.gateway.out for s in (a0, a1)) and a0.gateway.ins.get("B"), 10,
                         "gateways both ways with the Go server")
            for s in (a0, a1):
                assert all(_ssl(c) for c in s.gateway.conns)
            async with clients([a1.client_url, f"nats://127.0.0.1:{cport}"]) as (nr, ng):
                async def go_svc(m):
                    await m.respond(b"go:" + m.data)
                got = Inbox()
                await ng.subscribe("svc.go", cb=go_svc)
                await nr.subscribe("to.rillet", cb=got.cb)
                await ng.flush()
                await nr.flush()
                await _until(lambda: _interest(a1, "B", "svc.go"), what="Go's interest over TLS")
                r = await nr.request("svc.go", b"1", timeout=2)
                assert r.data == b"go:1"
                for _ in range(100):  # (Go learns our interest over its outbound, switched to interest-only)
                    await ng.publish("to.rillet", b"g")
                    await ng.flush()
                    await asyncio.sleep(0.05)
                    if got.msgs:
                        break
                assert got.data and set(got.data) == {b"g"}


@pytest.mark.skipif(GO_SERVER is None, reason="nats-server binary not on PATH")
async def test_go_server_refuses_a_rillet_gateway_from_another_ca(pki):
    """The Go server's words for the certificate it cannot verify, and Rillet's for Go's."""
    import subprocess
    import tempfile
    cport, gport = free_port(), free_port()
    conf = (f"port: {cport}\nserver_name: go-b0\n"
            f"gateway {{ name: B, listen: 127.0.0.1:{gport}\n {tls_block(pki)} }}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    proc = subprocess.Popen([GO_SERVER, "-c", f.name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    buf = io.StringIO()
    try:
        a = gw_server("a", "A", free_port(), buf=buf, tls=tls_block(pki, who="other_ca", ca="other_ca"),
                      remotes=f'{{name: B, url: "nats://127.0.0.1:{gport}"}}')
        async with started(a):
            await _until(lambda: "TLS gateway handshake error" in buf.getvalue(), 8, "Rillet refuses Go's cert")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=5)
    assert "TLS gateway handshake error" in err.decode()


# ==== reload ================================================================================================

def _text(pki, gw_port: int, tls: str, remotes: str = "") -> str:
    return (f"server_name: a\nlisten: 127.0.0.1:-1\n"
            f"gateway {{ name: A, listen: 127.0.0.1:{gw_port}\n {tls}\n gateways: [{remotes}] }}\n")


async def test_reload_accepts_tls_changes_and_rechecks_pinned_certs(pki):
    """As nats-server's reload: the gateway block's tls {} may change (here pinned_certs: the connected peer
    whose key is no longer pinned goes, and is refused when it comes back); its tls timeout may not, nor
    anything else of the block."""
    p = [free_port() for _ in range(2)]
    buf_a = io.StringIO()
    a = gw_server("a", "A", p[0], buf=buf_a, tls=tls_block(pki, extra=f'pinned_certs: ["{pki["ca_pin"]}"]'))
    b = gw_server("b", "B", p[1], remotes=f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}', tls=tls_block(pki))
    async with started(a, b):
        await _until(lambda: "A" in b.gateway.out and "B" in a.gateway.out, 6, "gateways up")
        # the same block: nothing happens
        a.reload(load_string(_text(pki, p[0], tls_block(pki, extra=f'pinned_certs: ["{pki["ca_pin"]}"]'))))
        assert "B" in a.gateway.out
        # a tls timeout change: refused as nats-server (the timeouts are compared: 2 s is the default)
        with pytest.raises(ValueError, match=r"^config reload not supported for Gateway: old=\{name:A "):
            a.reload(load_string(_text(pki, p[0], tls_block(pki, extra="timeout: 5"))))
        a.reload(load_string(_text(pki, p[0], tls_block(pki, extra=f'timeout: 2, pinned_certs: ["{pki["ca_pin"]}"]'))))
        # TLS off: refused too (nats-server's default authorization timeout follows the tls timeout)
        with pytest.raises(ValueError, match=r"^config reload not supported for Gateway"):
            a.reload(load_string(_text(pki, p[0], "")))
        # another key pinned: B's connections go, and B's next ones are refused
        a.reload(load_string(_text(pki, p[0], tls_block(pki, extra=f'pinned_certs: ["{pki["other_ca_pin"]}"]'))))
        assert "Disconnect 2 clients due to pinned certs reload" in buf_a.getvalue()
        await _until(lambda: "TLS gateway handshake error: certificate not pinned" in buf_a.getvalue(), 6,
                     "B refused at its next dial")
        assert not a.gateway.ins.get("B")
        # pins dropped again: B is accepted at its next dial
        a.reload(load_string(_text(pki, p[0], tls_block(pki))))
        await _until(lambda: a.gateway.ins.get("B") and "B" in a.gateway.out, 8, "B back after the reload")


async def test_reload_switches_a_remotes_tls_and_refuses_an_unloadable_one(pki):
    """B's remote A gets a tls {} block by reload (nats-server applies a remote's TLS to its next
    connections); a certificate that cannot be loaded refuses the reload."""
    p = [free_port() for _ in range(2)]
    a = gw_server("a", "A", p[0], tls=tls_block(pki))
    remote = f'{{name: A, url: "nats://127.0.0.1:{p[0]}"}}'
    b_text = lambda tls, remote_tls="": (  # noqa: E731
        f"server_name: b\nlisten: 127.0.0.1:-1\ngateway {{ name: B, listen: 127.0.0.1:{p[1]}\n {tls}\n"
        f' gateways: [{{name: A, url: "nats://127.0.0.1:{p[0]}"\n {remote_tls}}}] }}\n')
    buf_b = io.StringIO()
    b = gw_server("b", "B", p[1], remotes=remote, tls=tls_block(pki, who="other_ca", ca="other_ca"), buf=buf_b)
    async with started(a, b):
        await _until(lambda: "TLS gateway handshake error" in buf_b.getvalue(), 6, "B refused A's certificate")
        with pytest.raises(ValueError, match="gateway tls: "):
            b.reload(load_string(b_text(tls_block(pki, who="other_ca", ca="other_ca"),
                                        'tls { cert_file: "/nonexistent.pem", key_file: "/x.pem" }')))
        b.reload(load_string(b_text(tls_block(pki, who="other_ca", ca="other_ca"), tls_block(pki))))
        await _until(lambda: "A" in b.gateway.out, 8, "B's outbound with the remote's new TLS")


async def test_tls_handshake_timeout(pki):
    """A peer that opens the TLS gateway port and sends nothing is closed at the tls timeout, in nats-server's
    words; the listener goes on."""
    p = free_port()
    buf = io.StringIO()
    a = gw_server("a", "A", p, buf=buf, tls=tls_block(pki, extra="timeout: 0.3"))
    async with started(a):
        loop = asyncio.get_running_loop()
        r, w = await asyncio.open_connection("127.0.0.1", p)
        t0 = loop.time()
        assert await asyncio.wait_for(r.read(), 3) == b""  # closed without a byte (TLS first, no INFO)
        assert 0.2 < loop.time() - t0 < 2
        w.close()
        log = buf.getvalue()
        assert f"TLS gateway handshake error: read tcp 127.0.0.1:{p}->127.0.0.1:" in log and ": i/o timeout" in log
        assert "Gateway connection closed: TLS Handshake Failure" in log and "TLS handshake timeout" in log
        b = gw_server("b", "B", free_port(), remotes=f'{{name: A, url: "nats://127.0.0.1:{p}"}}', tls=tls_block(pki))
        async with started(b):
            await _until(lambda: "A" in b.gateway.out, 6, "a real gateway after the silent one")


@pytest.mark.skipif(GO_SERVER is None, reason="nats-server binary not on PATH")
@pytest.mark.parametrize("tls", [False, True])
def test_varz_gateway_as_nats_server(pki, tls):
    """/varz "gateway" for the same block, with and without TLS: nats-server's fields and values (its
    tls_cert_not_after aside, which Rillet does not show)."""
    import json
    import urllib.request

    from rillet.monitor.varz import varz_gateway
    from test_cluster_gateways import go_server
    block = (tls_block(pki) + "\n" if tls else "") + \
        'gateways: [{name: B, url: "nats://127.0.0.1:1"\n' + (tls_block(pki, extra="timeout: 4") if tls else "") + "}]"
    cport, hport, gport = free_port(), free_port(), free_port()
    with go_server(f"port: {cport}\nhttp: 127.0.0.1:{hport}\ngateway {{ name: A, listen: 127.0.0.1:{gport}\n"
                   f"{block} }}\n", [cport, hport]):
        with urllib.request.urlopen(f"http://127.0.0.1:{hport}/varz", timeout=5) as r:
            theirs = json.loads(r.read())["gateway"]
    theirs.pop("tls_cert_not_after", None)
    s = build_server(load_string(f"gateway {{ name: A, listen: 127.0.0.1:{gport}\n{block} }}\n"), Logger(out=io.StringIO()))
    assert json.loads(json.dumps(varz_gateway(s))) == theirs
