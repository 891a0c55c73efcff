"""Peer ids and the JetStream node registry (rillet/jetstream/cluster/peers.py), without servers."""
from __future__ import annotations

import json

import pytest

from rillet.jetstream.cluster.peers import JSConfig, JSStats, PeerRegistry, name_hash, peer_id


@pytest.mark.parametrize("name, want", [
    # (peer ids a live nats-server 2.15 cluster reported for these server names)
    ("g0", "uRE0XIhW"), ("g1", "pKmyMGN4"), ("g2", "FlDeG4Ai"),
])
def test_peer_ids_are_nats_servers(name, want):
    assert peer_id(name) == want == name_hash(name)


def _statsz(name, sid, seq=1, domain="", js=True, tags=("az:1",)):
    si = {"name": name, "host": "0.0.0.0", "id": sid, "cluster": "c", "ver": "2.15.1", "tags": list(tags),
          "jetstream": js, "flags": 3 if js else 0, "seq": seq, "time": "2026-11-25T16:31:30Z"}
    if domain:
        si["domain"] = domain
    st = {"start": "2026-11-25T16:31:29Z", "mem": 1}
    if js:
        st["jetstream"] = {"config": {"max_memory": 100, "max_storage": 1000, "unique_tag": "az:"},
                           "stats": {"memory": 1, "storage": 2, "reserved_memory": 3, "reserved_storage": 4,
                                     "accounts": 1, "ha_assets": 5, "api": {"total": 0, "errors": 0}}}
    return json.dumps({"server": si, "statsz": st}).encode()


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


def test_registry_updates():
    clock = Clock()
    reg = PeerRegistry("me", "IDME", domain="hub", clock=clock)
    changed = []
    reg.listeners.append(changed.append)
    reg.route_added("a", "IDA", "c")
    assert not reg.get(peer_id("a")).selectable
    assert reg.statsz(_statsz("me", "IDME")) is None  # our own
    n = reg.statsz(_statsz("a", "IDA", 5))
    assert n.selectable and n.js and n.binary_snapshots and not n.account_nrg
    assert n.cfg == JSConfig(100, 1000, "az:") and n.stats == JSStats(1, 2, 3, 4, 5)
    assert n.tags == ("az:1",) and n.version == "2.15.1"
    assert reg.statsz(_statsz("b", "IDB", domain="leaf")) is None  # another domain
    assert reg.statsz(_statsz("c", "IDC", domain="hub", js=False)).js is False
    assert reg.js_servers() == (1, 2)
    reg.statsz(_statsz("a", "IDA", 5))
    assert reg.out_of_order == 1
    for bad in (b"", b"[]", b'{"server": {}}', b"{nope"):
        assert reg.statsz(bad) is None
    assert reg.bad == 4
    assert changed == [peer_id("a"), peer_id("a"), peer_id("c"), peer_id("a")]
    clock.t = 100.0
    reg.statsz(_statsz("c", "IDC", 2, domain="hub", js=False))
    assert reg.sweep(max_age=50) == [peer_id("a")]
    assert reg.get(peer_id("a")).offline and not reg.get(peer_id("c")).offline
    assert reg.peers(online_only=True) == [peer_id("c")]
    assert reg.shutdown(json.dumps({"name": "c", "id": "IDC"})).offline
    assert reg.shutdown(b"x") is None and reg.bad == 5
    own = reg.set_local("me", "IDME", "c", tags=["az:2"], cfg=JSConfig(1, 1), stats=JSStats())
    assert own.selectable and reg.get(peer_id("me")).domain == "hub"
    reg.route_added("", "IDX", "c")  # (nameless: ignored)
    assert reg.by_server_id("IDX") is None


def test_meta_state_flag_of_rillet_statsz():
    """A Rillet server's statsz tells whether its meta group holds state (``rillet_meta_state``): unknown (None)
    until it says, and after a route registration replaced the entry; a Go server's never says."""
    reg = PeerRegistry("me", "IDME")
    assert reg.statsz(_statsz("go", "IDG")).meta_state is None
    for v in (True, False):
        d = json.loads(_statsz("r", "IDR"))
        d["statsz"]["jetstream"]["rillet_meta_state"] = v
        d["server"]["seq"] = 2 if v else 3
        assert reg.statsz(json.dumps(d).encode()).meta_state is v
    d["statsz"]["jetstream"]["rillet_meta_state"] = "yes"  # (not a bool: not said)
    d["server"]["seq"] = 4
    assert reg.statsz(json.dumps(d).encode()).meta_state is None
    reg.route_added("r", "IDR", "c")
    assert reg.get(peer_id("r")).meta_state is None
