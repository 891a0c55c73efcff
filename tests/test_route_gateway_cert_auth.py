"""Routes and gateways authorized by their certificate (rillet.cluster.conn ``_authorized``), side by side with
nats-server 2.15.1 as the accepting server:

* ``tls { verify_and_map: true }`` in the cluster (gateway) block: an inbound route (gateway) is let in when a name
  its certificate offers (email, DNS SANs, URIs, subject DN) is the block's authorization user; else refused;
* ``verify_cert_and_check_known_urls: true``: let in when a DNS SAN of its certificate names the host of one of the
  configured route URLs (gateway URLs); a certificate naming none of them is refused.

The dialling server is Rillet; the certificates name ``localhost`` (DNS SAN, and CN=localhost)."""
from __future__ import annotations

import asyncio
import io
import json
import shutil
import urllib.request

import pytest

from helpers import free_port
from rillet.app.compose import build_server
from rillet.config.options_builder import load_string
from rillet.server.auth import cert_names, dns_name_matches
from rillet.server.logging import Logger
from test_cluster_gateways_tls import pki  # noqa: F401  (the module-scoped certificates)
from test_cluster_gateways_tls import tls_block
from test_cluster_routes import go_server as go_route_server

needs_go = pytest.mark.skipif(shutil.which("nats-server") is None, reason="needs nats-server on PATH")


def _fetch(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=2) as r:
        return json.loads(r.read())


async def _steady(get, want, wait: float = 3.0) -> bool:
    """``get()`` reaches ``want`` within ``wait`` seconds and keeps it for one more second."""
    loop = asyncio.get_running_loop()
    end = loop.time() + wait
    while loop.time() < end:
        v = await loop.run_in_executor(None, get)
        if v == want:
            await asyncio.sleep(1.0)
            return await loop.run_in_executor(None, get) == want
        await asyncio.sleep(0.1)
    return False


def test_names_and_known_url_matching():
    cert = {"subject": ((("commonName", "localhost"),), (("organizationName", "Acme, Inc"),)),
            "subjectAltName": (("DNS", "a.example.com"), ("email", "ops@example.com"), ("URI", "spiffe://x/y"))}
    assert cert_names(cert) == [("ops@example.com", False), ("a.example.com", True), ("spiffe://x/y", False),
                                ("O=Acme\\, Inc,CN=localhost", False)]
    assert dns_name_matches("A.Example.com", ["nats://a.example.com:4222"])
    assert dns_name_matches("*.example.com", ["nats-route://b.example.com:6222", "x:1"])
    assert not dns_name_matches("*.example.com", ["nats://a.b.example.com:1"])  # (one label only)
    assert not dns_name_matches("a.*.com", ["nats://a.example.com:1"])  # (left-most only)
    assert not dns_name_matches("localhost", ["nats://127.0.0.1:1"])


# ==== routes ====================================================================================================

def _route_conf(name: str, port: int, cl_port: int, tls: str, routes: str = "", extra: str = "",
                http: int = 0) -> str:
    text = f"server_name: {name}\nlisten: 127.0.0.1:{port}\n"
    if http:
        text += f"http: 127.0.0.1:{http}\n"
    return text + f"cluster {{ name: c, listen: 127.0.0.1:{cl_port}, routes: [{routes}]\n {tls}\n {extra} }}\n"


CASES = [  # (tls extra, authorization or routes of the accepting server, let in)
    ("verify_and_map: true", 'authorization { user: "localhost" }', True),
    ("verify_and_map: true", 'authorization { user: "CN=localhost" }', True),
    ("verify_and_map: true", 'authorization { user: "someone" }', False),
    ("verify_cert_and_check_known_urls: true", "localhost", True),
    ("verify_cert_and_check_known_urls: true", "127.0.0.1", False),
]


@pytest.mark.parametrize("kind", ["rillet", pytest.param("go", marks=needs_go)])
@pytest.mark.parametrize("tls_extra, setting, let_in", CASES)
async def test_route_authorized_by_certificate(pki, kind, tls_extra, setting, let_in):  # noqa: F811
    acl, dcl = free_port(), free_port()
    routes, extra = "", setting
    if "known_urls" in tls_extra:
        # the accepting server's route URL names this host (only hosts are compared), at a port where nobody
        # listens: only the dialler's inbound route can connect them
        routes, extra = f"nats://{setting}:{free_port()}", ""
    acc_conf = _route_conf("acc", free_port(), acl, tls_block(pki, extra=tls_extra), routes, extra,
                           http=free_port() if kind == "go" else 0)
    buf = io.StringIO()
    dialler = build_server(load_string(_route_conf("dial", free_port(), dcl, tls_block(pki),
                                                   f"nats://127.0.0.1:{acl}")), Logger(debug=True, out=io.StringIO()))
    if kind == "rillet":
        acc = build_server(load_string(acc_conf), Logger(debug=True, out=buf))
        await acc.start()
        try:
            await dialler.start()
            try:
                ok = await _steady(lambda: acc.cluster.servers_connected(), 1)
                assert ok is let_in
                if not let_in:
                    assert "authentication error" in buf.getvalue()
            finally:
                await dialler.shutdown()
        finally:
            await acc.shutdown()
        return
    http = int(acc_conf.split("http: 127.0.0.1:")[1].split("\n")[0])
    with go_route_server(acc_conf, http):
        await dialler.start()
        try:
            assert await _steady(lambda: min(_fetch(http, "routez")["num_routes"], 1), 1) is let_in  # (pooled: several)
        finally:
            await dialler.shutdown()


# ==== gateways ==================================================================================================

def _gw_conf(name: str, cluster: str, gw_port: int, tls: str, remotes: str = "", extra: str = "",
             http: int = 0) -> str:
    text = f"server_name: {name}\nlisten: 127.0.0.1:{free_port()}\n"
    if http:
        text += f"http: 127.0.0.1:{http}\n"
    return text + f"gateway {{ name: {cluster}, listen: 127.0.0.1:{gw_port}\n {tls}\n {extra}\n gateways: [{remotes}] }}\n"


@pytest.mark.parametrize("kind", ["rillet", pytest.param("go", marks=needs_go)])
@pytest.mark.parametrize("tls_extra, setting, let_in", CASES)
async def test_gateway_authorized_by_certificate(pki, kind, tls_extra, setting, let_in):  # noqa: F811
    from test_cluster_gateways import go_server as go_gw_server
    pa, pb = free_port(), free_port()
    # A accepts B's gateway; with known URLs A knows a gateway C at the host tried (a port where nobody listens:
    # only hosts are compared, and A dials no B of its own)
    remotes, extra = "", setting
    if "known_urls" in tls_extra:
        remotes, extra = f'{{name: C, url: "nats://{setting}:{free_port()}"}}', ""
    http = free_port() if kind == "go" else 0
    a_conf = _gw_conf("a", "A", pa, tls_block(pki, extra=tls_extra), remotes, extra, http)
    b = build_server(load_string(_gw_conf("b", "B", pb, tls_block(pki), f'{{name: A, url: "nats://127.0.0.1:{pa}"}}')),
                     Logger(debug=True, out=io.StringIO()))
    b.gateway.solicit_delay = 0.05
    if kind == "rillet":
        buf = io.StringIO()
        a = build_server(load_string(a_conf), Logger(debug=True, out=buf))
        a.gateway.solicit_delay = 0.05
        await a.start()
        try:
            await b.start()
            try:
                assert await _steady(lambda: len(a.gateway.ins.get("B", [])), 1) is let_in
                if not let_in:
                    assert "authentication error" in buf.getvalue()
            finally:
                await b.shutdown()
        finally:
            await a.shutdown()
        return
    with go_gw_server(a_conf, [pa, http]):
        await b.start()
        try:
            assert await _steady(lambda: len(_fetch(http, "gatewayz").get("inbound_gateways") or {}), 1) is let_in
        finally:
            await b.shutdown()
