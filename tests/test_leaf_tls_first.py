"""Leaf connections with ``tls { handshake_first }`` (nats-server 2.11): the hub's listener takes the TLS handshake
before it sends its INFO (with a fallback delay: a leaf that stays silent gets the INFO in the clear and the usual
upgrade), and a remote with it dials straight into TLS; interoperating with nats-server both ways."""
from __future__ import annotations

import asyncio
import json
import socket
import ssl
import tempfile

import pytest

from rillet.config import ConfigError
from rillet.config.options_builder import load_string
from test_cluster_leaf import (_both_ways, _go, _hub_tls, _remote_tls, _until, hub_port, leaf_ready, needs_go,
                               pki, rillet)

__all__ = ["pki"]  # (the module-scoped certificates fixture of test_cluster_leaf)


def _hub_first(pki, first: str = "true") -> str:
    return _hub_tls(pki).replace(" }", f", handshake_first: {first} }}", 1)


def _remote_first(pki, client: bool = False) -> str:
    return _remote_tls(pki, client=client).replace(" }", ", handshake_first: true }", 1)


def _first_bytes(port: int, ca: str, tls: bool, wait: float) -> bytes:
    """What the hub's leafnode port sends first within ``wait`` seconds: over TLS started at once, or in the clear
    to a connection that sends nothing."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        if tls:
            ctx = ssl.create_default_context(cafile=ca)
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        else:
            s = raw
        s.settimeout(wait)
        try:
            return s.recv(4096)
        except (socket.timeout, TimeoutError):
            return b""
    finally:
        raw.close()


async def test_hub_takes_the_tls_handshake_before_its_info(pki):
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_first(pki)} }}', "hub") as hub:
        loop = asyncio.get_running_loop()
        port = hub_port(hub)
        assert await loop.run_in_executor(None, _first_bytes, port, pki["ca"], False, 1.0) == b""  # (no INFO)
        first = await loop.run_in_executor(None, _first_bytes, port, pki["ca"], True, 5.0)
        assert first.startswith(b"INFO "), first
        info = json.loads(first[5:first.index(b"\r\n")])
        assert info["tls_required"] is True and info["nonce"]


async def test_hub_falls_back_to_info_first_for_a_silent_leaf(pki):
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_first(pki, first=chr(34) + "300ms" + chr(34))} }}',
                      "hub") as hub:
        first = await asyncio.get_running_loop().run_in_executor(None, _first_bytes, hub_port(hub), pki["ca"], False,
                                                                 5.0)
        assert first.startswith(b"INFO ") and b'"tls_required":true' in first, first
        # a leaf that upgrades after the INFO, as without handshake_first, connects
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki)} }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "leaf after the fallback delay")
        # and one with handshake_first too
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_first(pki)} }} ] }}', "leaf2") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "TLS-first leaf")


async def test_tls_first_leaf_connects_and_carries_messages(pki):
    async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_first(pki)} }}', "hub") as hub:
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_first(pki)} }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "TLS-first leaf connection")
            for s in (hub, leaf):
                assert next(iter(s.leafs.values())).transport.get_extra_info("ssl_object") is not None
            await _both_ways(hub.client_url, leaf.client_url)
        # a leaf without handshake_first waits for an INFO that a hub without a fallback never sends in the clear
        async with rillet(f'leafnodes {{ remotes [ {{ url: "{url}", {_remote_tls(pki)} }} ] }}', "plain") as leaf:
            await asyncio.sleep(2.0)
            assert not leaf_ready(leaf) and not leaf_ready(hub)


def test_handshake_first_is_taken_in_leafnode_tls_blocks_only_where_nats_server_takes_it(pki):
    o = load_string(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_first(pki, chr(34) + "auto" + chr(34))}\n'
                    f'  remotes [ {{ url: "nats://127.0.0.1:1", {_remote_first(pki)} }} ] }}', "x.conf")
    assert o.leaf.tls.handshake_first and o.leaf.tls.handshake_first_fallback > 0
    assert o.leaf.remotes[0].tls.handshake_first
    cert, key = pki["ca_server"]
    with pytest.raises(ConfigError, match="'handshake_first' is not supported in the cluster tls block"):
        load_string(f'cluster {{ listen: "127.0.0.1:-1", tls {{ cert_file: "{cert}", key_file: "{key}", '
                    f'handshake_first: true }} }}', "x.conf")


@needs_go
async def test_tls_first_leafs_with_go(pki):
    with tempfile.TemporaryDirectory() as tmp:
        from helpers import free_port
        lport = free_port()
        go, port, _ = _go(f'leafnodes {{ listen: "127.0.0.1:{lport}", {_hub_first(pki)} }}', tmp)
        with go:
            go.wait_ready()
            conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{lport}", {_remote_first(pki)} }} ] }}'
            async with rillet(conf, "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), 15.0, "Rillet TLS-first leaf of a Go hub")
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
        async with rillet(f'leafnodes {{ listen: "127.0.0.1:-1", {_hub_first(pki)} }}', "hub") as hub:
            conf = f'leafnodes {{ remotes [ {{ url: "nats://127.0.0.1:{hub_port(hub)}", {_remote_first(pki)} }} ] }}'
            go, port, _ = _go(conf, tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), 15.0, "Go TLS-first leaf of a Rillet hub")
                await _both_ways(hub.client_url, f"nats://127.0.0.1:{port}")
