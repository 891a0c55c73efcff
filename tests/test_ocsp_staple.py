"""OCSP stapling (top-level ``ocsp { mode, urls }``): the server fetches its certificate's status from the
responder tests/test_ocsp.py runs and staples it; a client that asks (pyOpenSSL's request_ocsp) sees the
staple. Modes, bad answers (revoked, unknown, expired, no answer), the copy under store_dir/ocsp, the
monitor's refresh and shutdown on revocation, websocket; the same configurations against nats-server
where the outcome is comparable."""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from typing import Any

import pytest

pytest.importorskip("cryptography")
SSL = pytest.importorskip("OpenSSL.SSL")
import nats
from cryptography.x509 import ocsp

from rillet.config.errors import ConfigError
from rillet.config.options_builder import load_string
from rillet.server import ocsp_staple
from tests.difftarget import _write, go_server, rillet_server
from tests.helpers import free_port
from tests.test_ocsp import PKI, Responder


@pytest.fixture
def pki(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = Responder()
    p = PKI(str(tmp_path), r.url)
    r.pki = p
    p.responder = r  # type: ignore[attr-defined]
    for name in ("st-good", "st-revoked", "st-unknown"):
        p.issue(name, server=True)  # server certificates naming the responder
    p.issue("ms-good", server=True, must_staple=True)
    p.issue("ms-revoked", server=True, must_staple=True)
    yield p
    r.close()


def _conf(pki: PKI, cert: str, mode: str | None, store: str | None = None, extra: str = "") -> str:
    _, cf, kf = pki.certs[cert]
    text = f"listen: 127.0.0.1:{free_port()}\n"
    if mode is not None:
        text += f"ocsp {{ mode: {mode} }}\n"
    if store:
        text += f'jetstream {{ store_dir: "{store}" }}\n'
    return text + extra + (f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}", '
                           f'timeout: 3 }}\n')


def _port(srv: Any) -> int:
    return int(srv.client_url.rsplit(":", 1)[1])


def staple_of(port: int, ca_file: str, nats_info: bool = True, max_version: int | None = None) -> bytes | None:
    """The stapled OCSP response a TLS client that asks for one gets (None: none was stapled)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if nats_info:
            s.recv(4096)  # INFO in the clear, then the upgrade
        s.settimeout(None)  # (pyOpenSSL wants a blocking socket; the server's TLS timeout bounds the wait)
        got: dict[str, bytes] = {}
        ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
        ctx.load_verify_locations(ca_file)
        ctx.set_verify(SSL.VERIFY_PEER, lambda *a: bool(a[-1]))
        if max_version is not None:
            ctx.set_max_proto_version(max_version)

        def cb(_conn: Any, data: bytes, _x: Any) -> bool:
            got["staple"] = data
            return True

        ctx.set_ocsp_client_callback(cb)
        c = SSL.Connection(ctx, s)
        c.set_connect_state()
        c.set_tlsext_host_name(b"localhost")
        c.request_ocsp()
        c.do_handshake()
        return got.get("staple") or None
    finally:
        s.close()


async def _staple(port: int, pki: PKI, nats_info: bool = True) -> bytes | None:
    return await asyncio.get_running_loop().run_in_executor(None, staple_of, port, pki.ca_file, nats_info)


def _status(raw: bytes) -> str:
    r = ocsp.load_der_ocsp_response(raw)
    return r.certificate_status.name.lower()


async def _nats_ok(srv: Any, pki: PKI) -> bool:
    import ssl
    ctx = ssl.create_default_context(cafile=pki.ca_file)
    try:
        nc = await nats.connect(srv.client_url.replace("nats://", "tls://"), tls=ctx, tls_hostname="localhost",
                                connect_timeout=4, allow_reconnect=False, max_reconnect_attempts=0)
    except Exception:
        return False
    try:
        sub = await nc.subscribe("s")
        await nc.publish("s", b"x" * 70000)
        return len((await sub.next_msg(3)).data) == 70000
    finally:
        await nc.close()


def _go_start_error(conf: str) -> tuple[int, str]:
    """nats-server started with ``conf`` that should not start: (exit status, stderr)."""
    path = _write(conf)
    try:
        p = subprocess.run(["nats-server", "-c", path], capture_output=True, text=True, timeout=40)
        return p.returncode, p.stderr + p.stdout
    except subprocess.TimeoutExpired:
        return -1, "still running"
    finally:
        os.unlink(path)


# ---- stapled ------------------------------------------------------------------------------------------------

async def test_always_staples_good_and_keeps_a_copy(pki, tmp_path):
    store = str(tmp_path / "js")
    async with rillet_server(_conf(pki, "st-good", "always", store)) as srv:
        raw = await _staple(_port(srv), pki)
        assert raw is not None and _status(raw) == "good"
        assert await _nats_ok(srv, pki)
        log = srv._test_log.getvalue()
        assert "OCSP Stapling enabled for client connections" in log
        assert "Found OCSP status for client certificate at" in log and ": good, next update" in log
    files = os.listdir(os.path.join(store, "ocsp"))
    assert len(files) == 1 and len(files[0]) == 64
    with open(os.path.join(store, "ocsp", files[0]), "rb") as f:
        assert f.read() == raw
    assert pki.responder.posts >= 1  # POST first, as nats-server


async def test_auto_staples_only_must_staple_certificates(pki):
    async with rillet_server(_conf(pki, "st-good", "auto")) as srv:
        assert await _staple(_port(srv), pki) is None
        assert await _nats_ok(srv, pki)
    async with rillet_server(_conf(pki, "ms-good", None)) as srv:  # no ocsp block: auto
        raw = await _staple(_port(srv), pki)
        assert raw is not None and _status(raw) == "good"
    async with rillet_server(_conf(pki, "ms-good", "never")) as srv:
        assert await _staple(_port(srv), pki) is None
        assert "has MustStaple but OCSP is disabled" in srv._test_log.getvalue()


async def test_auto_staples_a_revoked_status_must_refuses_to_start(pki):
    async with rillet_server(_conf(pki, "ms-revoked", "auto")) as srv:
        raw = await _staple(_port(srv), pki)
        assert raw is not None and _status(raw) == "revoked"
    with pytest.raises(ValueError, match="found existing OCSP status for certificate at '.*': revoked"):
        async with rillet_server(_conf(pki, "ms-revoked", "must")):
            pass
    rc, out = await asyncio.get_running_loop().run_in_executor(None, _go_start_error,
                                                               _conf(pki, "ms-revoked", "must"))
    assert rc == 1 and "found existing OCSP status for certificate at" in out and "revoked" in out, out
    async with go_server(_conf(pki, "ms-revoked", "auto")) as g:  # nats-server: starts, staples it too
        raw = await _staple(_port(g), pki)
        assert raw is not None and _status(raw) == "revoked"


async def test_urls_override_the_certificates_responders(pki):
    """``ocsp { url }`` / ``ocsp { urls }``: asked instead of the certificate's AIA (here a certificate
    without one). nats-server 2.15 refuses a ``urls`` list at load ("interface conversion: interface {} is
    []interface {}, not []string"): only ``url`` is compared; Rillet takes both."""
    _, cf, kf = pki.issue("noaia-srv", server=True, aia=False)

    def conf(key: str, value: str) -> str:
        return (f"listen: 127.0.0.1:{free_port()}\nocsp {{ mode: always, {key}: {value} }}\n"
                f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}" }}\n')
    one = f'"{pki.responder.url}/"'
    for factory, text in ((rillet_server, conf("url", one)), (go_server, conf("url", one)),
                          (rillet_server, conf("urls", f'["http://127.0.0.1:1", {one}]'))):
        async with factory(text) as srv:
            raw = await _staple(_port(srv), pki)
            assert raw is not None and _status(raw) == "good", factory


@pytest.mark.parametrize("cert,mode,expect", [
    ("st-revoked", "always", "found existing OCSP status for certificate at '[^']*': revoked"),
    ("st-unknown", "always", "found existing OCSP status for certificate at '[^']*': unknown"),
    ("st-good", "always:expired", "bad OCSP status update for certificate at '[^']*': invalid ocsp NextUpdate, "
                                  "is past time"),
    ("st-good", "always:http500", "bad OCSP status update for certificate at '[^']*': exhausted ocsp servers"),
    ("noaia", "always", "bad OCSP status update for certificate at '[^']*': no available ocsp servers"),
])
async def test_bad_status_keeps_the_server_from_starting(pki, cert, mode, expect):
    mode, _, responder_mode = mode.partition(":")
    pki.responder.mode = responder_mode or "normal"
    if cert == "noaia":
        pki.issue("noaia-srv", server=True, aia=False)
        cert = "noaia-srv"
    conf = _conf(pki, cert, mode)
    with pytest.raises(ValueError, match=expect):
        async with rillet_server(conf):
            pass
    rc, out = await asyncio.get_running_loop().run_in_executor(None, _go_start_error, conf)
    assert rc == 1 and __import__("re").search(expect, out), out


async def test_responder_that_does_not_answer(pki, monkeypatch):
    monkeypatch.setattr(ocsp_staple, "HTTP_TIMEOUT", 0.5)
    pki.responder.mode = "silent"
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="exhausted ocsp servers: .*no answer within 0.5s"):
        async with rillet_server(_conf(pki, "st-good", "always")):
            pass
    assert time.monotonic() - t0 < 4


async def test_get_when_post_is_refused_and_store_copy_used_at_restart(pki, tmp_path):
    store = str(tmp_path / "js")
    pki.responder.no_post = True
    async with rillet_server(_conf(pki, "st-good", "always", store)) as srv:
        assert _status(await _staple(_port(srv), pki)) == "good"
    assert pki.responder.requests >= 1
    pki.responder.mode = "http500"  # the responder is down: the copy under store_dir/ocsp serves
    before = pki.responder.requests
    async with rillet_server(_conf(pki, "st-good", "always", store)) as srv:
        assert _status(await _staple(_port(srv), pki)) == "good"
    assert pki.responder.requests == before


async def _until(check: Any, timeout: float = 8.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(0.05)
    return bool(check())


async def test_monitor_refreshes_and_shuts_down_on_revocation(pki, monkeypatch):
    monkeypatch.setattr(ocsp_staple.StapleMonitor, "next_run", lambda self: 0.3)
    async with rillet_server(_conf(pki, "st-good", "always")) as srv:
        log = srv._test_log.getvalue
        assert await _until(lambda: "Received OCSP status for client certificate" in log())
        pki.responder.mode = "http500"
        assert await _until(lambda: "Bad OCSP status update for certificate" in log())
        assert not srv.shutting_down  # a failing responder: the last good answer stays stapled
        assert _status(await _staple(_port(srv), pki)) == "good"
        pki.responder.mode = "all-revoked"
        assert await _until(lambda: srv.shutting_down)
        assert "': revoked" in log()


async def test_auto_mode_revocation_keeps_serving_the_new_status(pki, monkeypatch):
    monkeypatch.setattr(ocsp_staple.StapleMonitor, "next_run", lambda self: 0.3)
    async with rillet_server(_conf(pki, "ms-good", "auto")) as srv:
        pki.responder.mode = "all-revoked"
        assert await _until(lambda: "certificate '" in srv._test_log.getvalue()
                            and "': revoked" in srv._test_log.getvalue())
        assert not srv.shutting_down
        assert _status(await _staple(_port(srv), pki)) == "revoked"


async def test_out_of_date_staple_fails_the_handshake(pki):
    async with rillet_server(_conf(pki, "st-good", "always")) as srv:
        mon = srv.staples["client"]
        mon.status.next_update = mon.status.this_update  # (as if nextUpdate had passed)
        pki.responder.mode = "http500"
        with pytest.raises((SSL.Error, OSError)):  # (the server's alert, or the connection cut)
            await _staple(_port(srv), pki)
        assert mon.handshakes_refused == 1
        assert await _until(lambda: "TLS handshake error: no current OCSP status for client certificate"
                            in srv._test_log.getvalue())
        pki.responder.mode = "normal"
        raw = None
        for _ in range(40):  # each refused handshake starts a fetch (one at a time): one of them succeeds
            try:
                raw = await _staple(_port(srv), pki)
                break
            except Exception:
                await asyncio.sleep(0.1)
        assert raw is not None and _status(raw) == "good"
        assert mon.status.next_update > mon.status.this_update


async def test_tls12_client_min_version_and_a_probe(pki):
    """A TLS 1.2 client gets the staple too (CertificateStatus message); ``min_version: "1.3"`` refuses it;
    a client that does not speak TLS is dropped and the server goes on."""
    loop = asyncio.get_running_loop()
    async with rillet_server(_conf(pki, "st-good", "always")) as srv:
        raw = await loop.run_in_executor(None, staple_of, _port(srv), pki.ca_file, True, SSL.TLS1_2_VERSION)
        assert raw is not None and _status(raw) == "good"
        r, w = await asyncio.open_connection("127.0.0.1", _port(srv))
        await r.readline()  # INFO
        w.write(b"GET / HTTP/1.0\r\n\r\n" * 20)
        await w.drain()
        assert await asyncio.wait_for(r.read(), 5) is not None  # closed by the server
        w.close()
        assert await _nats_ok(srv, pki)
    text = _conf(pki, "st-good", "always").replace("timeout: 3", 'timeout: 3, min_version: "1.3"')
    async with rillet_server(text) as srv:
        with pytest.raises(SSL.Error):
            await loop.run_in_executor(None, staple_of, _port(srv), pki.ca_file, True, SSL.TLS1_2_VERSION)
        assert _status(await _staple(_port(srv), pki)) == "good"


async def test_websocket_staples(pki):
    _, cf, kf = pki.certs["st-good"]
    ws_port = free_port()
    extra = (f'websocket {{ listen: "127.0.0.1:{ws_port}", '
             f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}" }} }}\n')
    async with rillet_server(_conf(pki, "st-good", "always", extra=extra)):
        raw = await _staple(ws_port, pki, nats_info=False)
        assert raw is not None and _status(raw) == "good"


async def test_mqtt_staples_and_checks_clients(pki, tmp_path):
    """MQTT staples too; its clients are checked by the client port's ocsp_peer through the pyOpenSSL
    connection (verified chain), as with the stdlib one."""
    from tests.test_ocsp import _mqtt_connects
    _, cf, kf = pki.certs["st-good"]
    mport = free_port()
    tls = (f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}", verify: true, '
           f'ocsp_peer: true }}')
    conf = (f"listen: 127.0.0.1:{free_port()}\nserver_name: m1\nocsp {{ mode: always }}\n"
            f'jetstream {{ store_dir: "{tmp_path}/js" }}\n{tls}\n'
            f'mqtt {{ listen: "127.0.0.1:{mport}", {tls.replace(", ocsp_peer: true", "")} }}\n')
    async with rillet_server(conf) as srv:
        assert set(srv.staples) == {"client", "mqtt"}
        assert await _mqtt_connects(mport, pki, "good")
        assert not await _mqtt_connects(mport, pki, "revoked")


async def test_stapled_port_keeps_client_checks_tls_first_and_maps(pki):
    """The pyOpenSSL connection gives the server what the stdlib one gives: the verified chain for
    ocsp_peer, the certificate for verify_and_map, the TLS version and cipher for /connz; handshake_first
    staples as well."""
    from tests.test_ocsp import _client_ctx
    _, cf, kf = pki.certs["st-good"]
    conf = (f"listen: 127.0.0.1:{free_port()}\nocsp {{ mode: always }}\n"
            f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}", verify_and_map: true, '
            f"ocsp_peer: true, handshake_first: true }}\n"
            'authorization { users: [ { user: "CN=good" } ] }\n')
    async with rillet_server(conf) as srv:
        url = srv.client_url.replace("nats://", "tls://")
        raw = await _staple(_port(srv), pki, nats_info=False)
        assert raw is not None and _status(raw) == "good"

        async def connects(name: str) -> bool:
            ctx = _client_ctx(pki, name)
            try:
                nc = await nats.connect(url, tls=ctx, tls_hostname="localhost", tls_handshake_first=True,
                                        connect_timeout=4, allow_reconnect=False, max_reconnect_attempts=0)
            except Exception:
                return False
            try:
                await nc.flush(timeout=3)
                seen.extend((c.tls_version, c.tls_cipher) for c in srv.clients.values())
                return True
            finally:
                await nc.close()
        seen: list[tuple[str, str]] = []
        assert await connects("good")  # mapped by its CN, its chain checked with the responder
        assert seen and seen[0][0] == "TLSv1.3" and seen[0][1].startswith("TLS_")
        assert not await connects("revoked")  # refused by ocsp_peer
        assert not await connects("unknown")
    log = srv._test_log.getvalue()
    assert "client not OCSP valid" in log


async def test_same_staple_as_nats_server(pki, tmp_path):
    """Both servers, the same configuration: a client asking for the status gets a good staple from
    each, and each keeps it under store_dir/ocsp by the certificate's SHA-256."""
    names = {}
    for which, factory in (("rillet", rillet_server), ("go", go_server)):
        store = str(tmp_path / f"js-{which}")
        async with factory(_conf(pki, "st-good", "always", store)) as srv:
            raw = await _staple(_port(srv), pki)
            assert raw is not None and _status(raw) == "good", which
        names[which] = sorted(os.listdir(os.path.join(store, "ocsp")))
    assert names["rillet"] == names["go"] and len(names["go"]) == 1


async def test_store_copy_written_by_nats_server_is_read(pki, tmp_path):
    store = str(tmp_path / "js")
    async with go_server(_conf(pki, "st-good", "always", store)):
        pass
    pki.responder.mode = "http500"
    async with rillet_server(_conf(pki, "st-good", "always", store)) as srv:
        assert _status(await _staple(_port(srv), pki)) == "good"


# ---- config ------------------------------------------------------------------------------------------------

def test_routes_and_gateways_refused(pki):
    _, cf, kf = pki.certs["st-good"]
    tls = f'tls {{ cert_file: "{cf}", key_file: "{kf}", ca_file: "{pki.ca_file}" }}'
    for block in (f"cluster {{ port: -1, {tls} }}", f"gateway {{ name: A, port: -1, {tls} }}"):
        with pytest.raises(ConfigError) as e:
            load_string(f"ocsp {{ mode: always }}\n{block}\n", "o.conf")
        assert "OpenSSL can neither send a staple" in str(e.value)
        load_string(f"ocsp {{ mode: auto }}\n{block}\n", "o.conf")  # nothing stapled: fine


async def test_reload_restarts_stapling_as_nats_server(pki):
    """A reload that changes nothing keeps the monitor; one that changes ``ocsp`` or the certificate makes
    the monitors again (nats-server's reloadOCSP); one whose new status cannot be had (here: revoked under
    always) stands without stapling, with nats-server's warning."""
    import shutil
    text = _conf(pki, "st-good", "always")
    async with rillet_server(text) as srv:
        mon = srv.staples["client"]
        srv.reload(load_string(text, "a.conf"))  # the same: the monitor stays
        assert srv.staples["client"] is mon and _status(await _staple(_port(srv), pki)) == "good"
        srv.reload(load_string(text.replace("mode: always", "mode: never"), "b.conf"))
        assert await _until(lambda: not srv.staples)
        assert await _staple(_port(srv), pki) is None
        srv.reload(load_string(text, "c.conf"))
        assert await _until(lambda: "client" in srv.staples)
        assert _status(await _staple(_port(srv), pki)) == "good"
        # another certificate under the same file name, revoked: no stapling, a warning, still serving
        _, cf, kf = pki.certs["st-good"]
        shutil.copy(pki.certs["st-revoked"][1], cf)
        shutil.copy(pki.certs["st-revoked"][2], kf)
        srv.reload(load_string(text, "d.conf"))
        assert await _until(lambda: "Can't restart OCSP features: found existing OCSP status for certificate"
                            in srv._test_log.getvalue())
        assert not srv.staples and not srv.shutting_down
        assert await _staple(_port(srv), pki) is None


def test_tls_server_that_does_not_staple_loads_neither_pyopenssl_nor_the_stapler(pki, tmp_path):
    import sys
    conf = tmp_path / "plain-tls.conf"
    conf.write_text(_conf(pki, "st-good", "auto"))  # no must-staple certificate: nothing stapled
    code = ("import asyncio, sys\n"
            "from rillet.config.flags import parse_command_line\n"
            "from rillet.app.embed import run_server\n"
            "async def main():\n"
            f"    async with run_server(parse_command_line(['-c', {str(conf)!r}]).options):\n"
            "        print('OpenSSL' in sys.modules, 'rillet.server.ocsp_staple' in sys.modules)\n"
            "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]
