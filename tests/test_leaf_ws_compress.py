"""``ws_compress`` on ws:// leafnode remotes (rillet.cluster.leaf_ws): the upgrade offers permessage-deflate without
context takeover (as nats-server's leafNodeSolicitWSConnection); a hub whose websocket {} has ``compression: true``
agrees and both sides deflate their larger frames; a hub without it answers without the extension and nothing is
compressed. Side by side with a nats-server hub, and a nats-server leaf with ws_compress on a Rillet hub."""
from __future__ import annotations

import asyncio
import tempfile

import nats
import pytest

from rillet.cluster import leaf_ws
from helpers import free_port
from test_cluster_leaf import _both_ways, _go, _until, leaf_ready, needs_go, rillet


def _hub(compression: bool, ws_port: str = "-1", leaf_port: str = "-1") -> str:
    return (f'websocket {{ listen: "127.0.0.1:{ws_port}", no_tls: true, compression: {str(compression).lower()} }}\n'
            f'leafnodes {{ listen: "127.0.0.1:{leaf_port}" }}')


def _leaf(ws_port: int) -> str:
    return f'leafnodes {{ remotes [ {{ url: "ws://127.0.0.1:{ws_port}", ws_compress: true }} ] }}'


def _dialer(leaf):
    return next(iter(leaf.leafs.values())).transport


async def _big_both_ways(hub_url: str, leaf_url: str) -> None:
    """Payloads well past the compression threshold, each way, arrive whole."""
    body = bytes(range(256)) * 40 + b"tail"
    hub_nc, leaf_nc = await nats.connect(hub_url), await nats.connect(leaf_url)
    try:
        for sub_nc, pub_nc, subj in ((hub_nc, leaf_nc, "big.up"), (leaf_nc, hub_nc, "big.down")):
            got: list = []

            async def cb(m, got=got):
                got.append(m.data)
            await sub_nc.subscribe(subj, cb=cb)
            await sub_nc.flush()
            for _ in range(100):
                await pub_nc.publish(subj, body)
                await pub_nc.flush()
                await asyncio.sleep(0.05)
                if got:
                    break
            assert got and got[0] == body
    finally:
        await hub_nc.close()
        await leaf_nc.close()


@pytest.mark.parametrize("compression", [True, False])
async def test_rillet_leaf_and_hub(compression):
    async with rillet(_hub(compression), "hub") as hub:
        async with rillet(_leaf(hub.websocket_addr[1]), "leaf") as leaf:
            await _until(lambda: leaf_ready(leaf) and leaf_ready(hub), 15.0, "leaf over websocket")
            d = _dialer(leaf)
            assert isinstance(d, leaf_ws.WSDialer) and d.compress is compression
            assert next(iter(hub.leafs.values())).transport.compress is compression
            await _both_ways(hub.client_url, leaf.client_url)
            await _big_both_ways(hub.client_url, leaf.client_url)
            assert f"Leafnode compression={str(compression).lower()}" in leaf._test_log.getvalue()


@needs_go
@pytest.mark.parametrize("compression", [True, False])
async def test_rillet_leaf_of_a_go_hub(compression):
    with tempfile.TemporaryDirectory() as tmp:
        wp = free_port()
        go, port, _ = _go(_hub(compression, str(wp)), tmp)
        with go:
            go.wait_ready()
            async with rillet(_leaf(wp), "leaf") as leaf:
                await _until(lambda: leaf_ready(leaf), 15.0, "Rillet leaf of a Go hub over websocket")
                assert _dialer(leaf).compress is compression
                await _both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)
                await _big_both_ways(f"nats://127.0.0.1:{port}", leaf.client_url)


@needs_go
async def test_go_leaf_with_ws_compress_on_a_rillet_hub():
    with tempfile.TemporaryDirectory() as tmp:
        async with rillet(_hub(True), "hub") as hub:
            go, port, _ = _go(_leaf(hub.websocket_addr[1]), tmp)
            with go:
                go.wait_ready()
                await _until(lambda: leaf_ready(hub), 15.0, "Go leaf over websocket")
                assert next(iter(hub.leafs.values())).transport.compress is True
                await _big_both_ways(hub.client_url, f"nats://127.0.0.1:{port}")


def test_extension_answer_parsing():
    assert leaf_ws._pmc_support("permessage-deflate; server_no_context_takeover; client_no_context_takeover") \
        == (True, True)
    assert leaf_ws._pmc_support("x-foo, Permessage-Deflate;client_no_context_takeover ; server_no_context_takeover") \
        == (True, True)
    assert leaf_ws._pmc_support("permessage-deflate") == (True, False)
    assert leaf_ws._pmc_support("x-foo") == (False, False)


def test_hub_message_inflating_without_bound_is_refused():
    """A compressed message from the hub inflates to at most INFLATED_LIMIT bytes (a deflate bomb is a
    protocol error, not memory without bound); an ordinary one inflates whole."""
    import zlib

    from rillet.cluster import leaf_ws

    def deflate(raw: bytes) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return (c.compress(raw) + c.flush(zlib.Z_SYNC_FLUSH))[:-4]  # (permessage-deflate drops the tail)

    msg = b"LMSG foo 5\r\nhello\r\n" * 1000
    assert leaf_ws.WSDialer._inflate(deflate(msg)) == msg
    bomb = deflate(b"\0" * (leaf_ws.INFLATED_LIMIT + 1024))
    assert len(bomb) < 1024 * 1024
    with pytest.raises(leaf_ws._TooBig):
        leaf_ws.WSDialer._inflate(bomb)
