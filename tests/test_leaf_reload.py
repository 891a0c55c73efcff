"""Leaf node remotes changed by a configuration reload (nats-server 2.12/2.14): a remote added is dialled, one
removed or ``disabled`` is closed and not dialled again, one enabled again is dialled; a remote's other settings
and the rest of the leafnodes block (but its tls {} and compression) still refuse the reload."""
from __future__ import annotations

import asyncio

import pytest

from rillet.config.options_builder import load_string
from test_cluster_leaf import _until, hub_port, leaf_ready, rillet


def _leaf_conf(*remotes: str) -> str:
    body = ", ".join(f"{{ {r} }}" for r in remotes)
    return f'listen: "127.0.0.1:-1"\nserver_name: leaf\nleafnodes {{ reconnect: "100ms", remotes [ {body} ] }}'


async def test_remotes_added_disabled_enabled_and_removed_by_a_reload():
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "h1") as h1, \
            rillet('leafnodes { listen: "127.0.0.1:-1" }', "h2") as h2:
        r1 = f'url: "nats://127.0.0.1:{hub_port(h1)}"'
        r2 = f'url: "nats://127.0.0.1:{hub_port(h2)}"'
        async with rillet(f'leafnodes {{ reconnect: "100ms", remotes [ {{ {r1} }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(h1), 15.0, "the first remote")
            leaf.reload(load_string(_leaf_conf(r1, r2)))  # added
            await _until(lambda: leaf_ready(h2) and leaf_ready(leaf, 2), 15.0, "the added remote")
            assert leaf_ready(h1)
            leaf.reload(load_string(_leaf_conf(r1 + ", disabled: true", r2)))  # disabled
            await _until(lambda: not leaf_ready(h1), 15.0, "the disabled remote's connection closed")
            await asyncio.sleep(1.0)  # (the reconnect interval is 100 ms: it would be back by now)
            assert not leaf_ready(h1) and leaf_ready(h2)
            leaf.reload(load_string(_leaf_conf(r1, r2)))  # enabled again
            await _until(lambda: leaf_ready(h1), 15.0, "the enabled remote")
            leaf.reload(load_string(_leaf_conf(r1)))  # removed
            await _until(lambda: not leaf_ready(h2), 15.0, "the removed remote's connection closed")
            await asyncio.sleep(1.0)
            assert not leaf_ready(h2) and leaf_ready(h1)
            log = leaf._test_log.getvalue()
            for line in ("added", "Disabled value is: true", "Disabled value is: false", "removed"):
                assert f"Reloaded: LeafNode Remote urls=" in log and line in log, line
            # what else a remote says cannot change at runtime (as nats-server): the reload is refused whole
            with pytest.raises(ValueError, match="config reload not supported for LeafNode remote"):
                leaf.reload(load_string(_leaf_conf(r1 + ', deny_imports: ["x"]')))
            assert leaf_ready(h1)


async def test_listener_tls_and_compression_change_by_a_reload_the_rest_does_not():
    async with rillet('leafnodes { listen: "127.0.0.1:-1" }', "hub") as hub:
        base = 'listen: "127.0.0.1:-1"\nserver_name: hub\nleafnodes { listen: "127.0.0.1:-1"'
        url = f"nats://127.0.0.1:{hub_port(hub)}"
        async with rillet(f'leafnodes {{ reconnect: "100ms", remotes [ {{ url: "{url}" }} ] }}', "leaf") as leaf:
            await _until(lambda: leaf_ready(hub) and leaf_ready(leaf), 15.0, "leaf connection")
            first = next(iter(hub.leafs.values()))
            hub.reload(load_string(base + ", compression: off }"))
            # the accepted connection is closed and comes again, without compression
            await _until(lambda: leaf_ready(hub) and next(iter(hub.leafs.values())) is not first, 15.0,
                         "the leaf back after the compression change")
            assert next(iter(hub.leafs.values())).compression == "off"
            with pytest.raises(ValueError, match="config reload not supported for LeafNode"):
                hub.reload(load_string(base + ', compression: off, reconnect: "5s" }'))
