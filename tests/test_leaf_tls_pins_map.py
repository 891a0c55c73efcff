"""Leaf connections' ``pinned_certs`` and ``verify_and_map`` (rillet.cluster.leaf_conn, rillet.cluster.leaf), side by
side with nats-server 2.15.1:

* the leafnodes tls {} block's ``pinned_certs``: a leaf whose key is not pinned is refused by the hub ("TLS leafnode
  handshake error: certificate not pinned"), a pinned one connects; the same config on a nats-server hub gives the
  same outcome. On the soliciting side, a remote's own ``pinned_certs`` (Rillet checks them, nats-server ignores
  them) and the block's refuse a hub whose key is not pinned; a reload pinning another key drops the leaf;
* ``verify_and_map`` on the hub's leafnodes tls {}: the leaf is the leafnodes authorization user its certificate
  names (here its DNS SAN) and binds to that user's account; no such user: refused; a nats-server hub alike;
* what nats-server refuses at load (verify_cert_and_check_known_urls in a leafnodes tls block) in its words.
"""
from __future__ import annotations

import asyncio
import tempfile

import pytest

from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from test_cluster_leaf import _both_ways, _go, _until, clients, hub_port, leaf_ready, needs_go, rillet
from test_cluster_gateways import Inbox

x509 = pytest.importorskip("cryptography.x509")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    import ipaddress

    from cryptography.hazmat.primitives.asymmetric import ec
    from test_tls_options import _cert, _spki_pin, _write
    tmp = tmp_path_factory.mktemp("leaf_pins")
    out = {}
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("leaf test ca", ca_key, None, ca_key, ca=True)
    out["ca"] = _write(tmp, "ca", ca, ca_key)[0]
    k = ec.generate_private_key(ec.SECP256R1())
    c = _cert("localhost", k, ca.subject, ca_key, [x509.DNSName("localhost"),
                                                    x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    out["server"], out["server_pin"] = _write(tmp, "server", c, k), _spki_pin(c)
    k = ec.generate_private_key(ec.SECP256R1())
    c = _cert("leaf1", k, ca.subject, ca_key, [x509.DNSName("leaf1.example")])
    out["client"], out["client_pin"] = _write(tmp, "client", c, k), _spki_pin(c)
    k = ec.generate_private_key(ec.SECP256R1())
    out["other_pin"] = _spki_pin(_cert("other", k, ca.subject, ca_key))
    return out


def hub_tls(pki, extra: str = "") -> str:
    cert, key = pki["server"]
    return f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}", verify: true\n {extra} }}'


def remote_tls(pki, extra: str = "") -> str:
    cert, key = pki["client"]
    return f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{pki["ca"]}"\n {extra} }}'


def _leaf_conf(port: int, pki, extra: str = "", block: str = "") -> str:
    return f'leafnodes {{ {block}\n remotes [ {{ url: "nats://127.0.0.1:{port}", {remote_tls(pki, extra)} }} ] }}'


async def _never(cond, wait: float = 2.0) -> bool:
    end = asyncio.get_running_loop().time() + wait
    while asyncio.get_running_loop().time() < end:
        if cond():
            return False
        await asyncio.sleep(0.05)
    return True


# ==== pinned_certs ==============================================================================================

async def _hub_pins_on(kind: str, pki, pin: str, tmp: str) -> tuple[bool, str]:
    """(connected, hub log) of a Rillet leaf with the client certificate, its hub (Rillet or nats-server) pinning
    ``pin`` in its leafnodes tls block."""
    block = hub_tls(pki, f'pinned_certs: ["{pin}"]')
    if kind == "rillet":
        async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {block} }}', "hub") as hub:
            async with rillet(_leaf_conf(hub_port(hub), pki), "leaf") as leaf:
                if pin == pki["client_pin"]:
                    await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "pinned leaf")
                    await _both_ways(hub.client_url, leaf.client_url)
                    return True, hub._test_log.getvalue()
                await _until(lambda: "certificate not pinned" in hub._test_log.getvalue(), 10.0, "refusal")
                return not await _never(lambda: leaf_ready(leaf)), hub._test_log.getvalue()
    from helpers import free_port
    lport = free_port()
    go, port, _ = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", {block} }}', tmp)
    with go:
        go.wait_ready()
        async with rillet(_leaf_conf(lport, pki), "leaf") as leaf:
            if pin == pki["client_pin"]:
                await _until(lambda: leaf_ready(leaf), 15.0, "pinned leaf of a Go hub")
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
                return True, "\n".join(go.lines)
            ok = not await _never(lambda: leaf_ready(leaf), 3.0)
            return ok, "\n".join(go.lines)


@pytest.mark.parametrize("kind", ["rillet", pytest.param("go", marks=needs_go)])
async def test_hub_pins_the_leaf_key(pki, kind):
    with tempfile.TemporaryDirectory() as tmp:
        up, _ = await _hub_pins_on(kind, pki, pki["client_pin"], tmp)
        assert up
        up, log = await _hub_pins_on(kind, pki, pki["other_pin"], tmp)
        assert not up
        if kind == "rillet":
            assert "TLS leafnode handshake error: certificate not pinned" in log


async def _leaf_pins_hub(kind: str, pki, tmp: str, extra: str = "", block: str = "") -> tuple[bool, str]:
    """(connected, leaf log) of a Rillet leaf pinning the hub's key (its remote's tls, or its leafnodes tls block)."""
    hub_block = hub_tls(pki)
    if kind == "rillet":
        async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {hub_block} }}', "hub") as hub:
            async with rillet(_leaf_conf(hub_port(hub), pki, extra, block), "leaf") as leaf:
                ok = not await _never(lambda: leaf_ready(leaf) and leaf_ready(hub), 3.0)
                return ok, leaf._test_log.getvalue()
    from helpers import free_port
    lport = free_port()
    go, _, _ = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", {hub_block} }}', tmp)
    with go:
        go.wait_ready()
        async with rillet(_leaf_conf(lport, pki, extra, block), "leaf") as leaf:
            ok = not await _never(lambda: leaf_ready(leaf), 3.0)
            return ok, leaf._test_log.getvalue()


@pytest.mark.parametrize("kind", ["rillet", pytest.param("go", marks=needs_go)])
async def test_leaf_pins_the_hub_key(pki, kind):
    with tempfile.TemporaryDirectory() as tmp:
        assert (await _leaf_pins_hub(kind, pki, tmp, f'pinned_certs: ["{pki["server_pin"]}"]'))[0]
        up, log = await _leaf_pins_hub(kind, pki, tmp, f'pinned_certs: ["{pki["other_pin"]}"]')
        assert not up and "TLS leafnode handshake error: certificate not pinned" in log
        # the leafnodes block's pins apply to the remotes' connections too (as nats-server's)
        cert, key = pki["client"]
        up, log = await _leaf_pins_hub(kind, pki, tmp, block=f'tls {{ cert_file: "{cert}", key_file: "{key}", '
                                                             f'pinned_certs: ["{pki["other_pin"]}"] }}')
        assert not up and "certificate not pinned" in log


async def test_reload_pinning_another_key_drops_the_leaf(pki):
    text = 'listen: "127.0.0.1:-1"\nserver_name: hub\nleafnodes {{ listen: "127.0.0.1:{port}", {blk} }}\n'
    from helpers import free_port
    port = free_port()
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:{port}", '
                      f'{hub_tls(pki, "pinned_certs: [" + chr(34) + pki["client_pin"] + chr(34) + "]")} }}',
                      "hub") as hub:
        async with rillet(_leaf_conf(port, pki), "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "pinned leaf")
            o = load_string(text.format(port=port, blk=hub_tls(pki, f'pinned_certs: ["{pki["other_pin"]}"]')),
                            "hub.conf")
            hub.reload(o)
            assert "Disconnect 1 clients due to pinned certs reload" in hub._test_log.getvalue()
            await _until(lambda: not leaf_ready(hub), 10.0, "leaf dropped")
            assert await _never(lambda: leaf_ready(hub), 2.0)


# ==== verify_and_map ============================================================================================

def _map_hub(pki, user: str, listen: str) -> str:
    return (f'accounts {{ A: {{ users: [{{user: a, password: a}}] }} }}\n'
            f'leafnodes {{ listen: "{listen}", {hub_tls(pki, "verify_and_map: true")}\n'
            f'  authorization {{ users: [ {{user: "{user}", account: A}} ] }} }}')


async def _a_sees_leaf(hub_url: str, leaf_url: str) -> None:
    """A client of account A on the hub hears what a client of the leaf publishes (the leaf is bound to A)."""
    hub_url = hub_url.replace("nats://", "nats://a:a@")
    async with clients(hub_url, leaf_url) as (nh, nl):
        got = Inbox()
        await nh.subscribe("mapped.>", cb=got.cb)
        await nh.flush()
        for i in range(100):
            await nl.publish(f"mapped.{i}", b"x")
            await nl.flush()
            if got.msgs:
                break
            await asyncio.sleep(0.1)
        assert got.msgs, "nothing crossed into account A"


@pytest.mark.parametrize("kind", ["rillet", pytest.param("go", marks=needs_go)])
async def test_verify_and_map_binds_the_leaf_to_its_certificate_user(pki, kind):
    with tempfile.TemporaryDirectory() as tmp:
        for user, ok in (("leaf1.example", True), ("someone-else", False)):
            if kind == "rillet":
                async with rillet(_map_hub(pki, user, "127.0.0.1:-1"), "hub") as hub:
                    async with rillet(_leaf_conf(hub_port(hub), pki), "leaf") as leaf:
                        if ok:
                            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "mapped leaf")
                            assert next(iter(hub.leafs.values())).account.name == "A"
                            await _a_sees_leaf(hub.client_url, leaf.client_url)
                        else:
                            assert await _never(lambda: leaf_ready(leaf), 3.0)
                continue
            from helpers import free_port
            lport = free_port()
            go, port, _ = _go(_map_hub(pki, user, f"127.0.0.1:{lport}"), tmp)
            with go:
                go.wait_ready()
                async with rillet(_leaf_conf(lport, pki), "leaf") as leaf:
                    if ok:
                        await _until(lambda: leaf_ready(leaf), 15.0, "mapped leaf of a Go hub")
                        await _a_sees_leaf(f"nats://127.0.0.1:{port}", leaf.client_url)
                    else:
                        assert await _never(lambda: leaf_ready(leaf), 3.0)


async def test_verify_and_map_without_leaf_users_maps_to_a_server_user(pki):
    """No leafnodes users: the server's users, the leaf's certificate naming one (nats-server's checkClientAuth
    with the leafnodes block's verify_and_map)."""
    conf = (f'accounts {{ A: {{ users: [{{user: a, password: a}}, {{user: "leaf1.example"}}] }} }}\n'
            f'leafnodes {{ listen: "127.0.0.1:-1", {hub_tls(pki, "verify_and_map: true")} }}')
    async with rillet(conf, "hub") as hub:
        async with rillet(_leaf_conf(hub_port(hub), pki), "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "mapped leaf")
            assert next(iter(hub.leafs.values())).account.name == "A"


# ==== configuration =============================================================================================

def test_leaf_tls_settings_at_load(pki):
    o = load_string(f'leafnodes {{ listen: "127.0.0.1:-1", {hub_tls(pki, "verify_and_map: true")} }}')
    assert o.leaf.tls.verify_and_map and o.leaf.tls.verify
    o = load_string(_leaf_conf(1, pki, f'pinned_certs: ["{pki["server_pin"]}"]'))
    assert o.leaf.remotes[0].tls.pinned_certs == [pki["server_pin"]]
    with pytest.raises(ConfigError, match=r"x.conf:2:\d+: verify_cert_and_check_known_urls not supported in this "
                                          r"context$"):
        load_string(f'leafnodes {{ listen: "127.0.0.1:-1", {hub_tls(pki, "verify_cert_and_check_known_urls: true")} }}',
                    "x.conf")
    with pytest.raises(ConfigError, match="verify_and_map is not supported: a remote is the connecting side"):
        load_string(_leaf_conf(1, pki, "verify_and_map: true"), "x.conf")
