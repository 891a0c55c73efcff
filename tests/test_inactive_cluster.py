"""gateway {} and leafnodes {} until they land, and cluster settings without a cluster port: the server
starts, warns once naming the block, and /routez, /gatewayz and /leafz report the live state, the way
nats-server reports a server configured for them but alone. (Routes themselves: tests/test_cluster_routes.py.)
"""
from __future__ import annotations

import json
import shutil
import urllib.request

import pytest

from helpers import GO, ServerProcess, free_port
from rillet.config.inactive import inactive_warnings
from rillet.config.options_builder import load_string

GO_SERVER = shutil.which("nats-server")
VOLATILE = ("now", "server_id", "server_name")


def fetch(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{path}", timeout=5) as r:
        body = json.loads(r.read())
    return {k: v for k, v in body.items() if k not in VOLATILE}


def endpoints(command: list[str] | None, conf: str, tmp_path, paths: list[str]) -> dict[str, dict]:
    http = free_port()
    path = tmp_path / f"{'go' if command else 'rillet'}.conf"
    path.write_text(f'listen: "127.0.0.1:-1"\nhttp: "127.0.0.1:{http}"\n{conf}\n')
    with ServerProcess("-c", str(path), command=command) as srv:
        srv.wait_ready()
        return {p: fetch(http, p) for p in paths}


def test_flags_of_the_cluster_discovery_tests_start_routing():
    """nats.py's ClusterDiscovery tests pass --cluster_listen, --routes and --cluster_name: the route port
    listens (a route that cannot be reached is retried), and no warning says otherwise."""
    cport = free_port()
    with ServerProcess("-a", "127.0.0.1", "-p", "-1", "--cluster_name", "CLUSTER",
                       "--cluster_listen", f"nats://127.0.0.1:{cport}",
                       "--routes", f"nats://127.0.0.1:{free_port()}") as srv:
        srv.wait_ready()
        srv.wait_log(rf"Listening for route connections on 127.0.0.1:{cport}")
        srv.wait_log(r"Cluster name is CLUSTER")
        srv.wait_log(r"Error trying to connect to route \(attempt 1\)")
        assert "are not active" not in srv.output


@pytest.mark.skipif(GO, reason="Rillet's own warnings")
def test_each_configured_block_is_named_in_a_warning(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('listen: "127.0.0.1:-1"\ncluster { name: C, listen: "127.0.0.1:-1" }\n'
                    'leafnodes { reconnect: "2s" }\n'  # (no port and no remotes: inactive, as in nats-server)
                    'system_account: SYS\naccounts { SYS {} }\n')
    with ServerProcess("-c", str(conf)) as srv:
        srv.wait_ready()
        warnings = [line for line in srv.lines if "[WRN]" in line]
    assert len(warnings) == 1, warnings  # (the cluster has a port: routes are active; gateways are active)
    assert "Leafnode settings (leafnodes block) are not active" in warnings[0]


def test_no_warning_without_cluster_settings():
    assert inactive_warnings(load_string("port: 4222")) == []
    assert inactive_warnings(load_string("cluster { name: X, port: 6222 }")) == []
    assert inactive_warnings(load_string("cluster { name: X }")) == [
        "Cluster settings (cluster block) are not active: without a cluster port (listen) there is no route "
        "listener, this server runs alone"]
    assert inactive_warnings(load_string("connect_error_reports: 10")) == [
        "connect_error_reports is not active: it applies to route, gateway and leafnode connections, "
        "and this server has no cluster port"]
    assert inactive_warnings(load_string("connect_error_reports: 10\ncluster { port: 6222 }")) == []


CASES = {
    "unconfigured": "",
    "cluster and gateway, alone": (
        'server_name: S1\n'
        'cluster { name: C1, listen: "127.0.0.1:%(c)d", routes: ["nats://127.0.0.1:%(r)d"] }\n'
        'gateway { name: C1, listen: "127.0.0.1:%(g)d" }'),
    "leafnodes, alone": 'leafnodes { listen: "127.0.0.1:%(l)d" }',
}


@pytest.mark.skipif(GO_SERVER is None or GO, reason="compares Rillet with nats-server on PATH")
@pytest.mark.parametrize("case", list(CASES))
def test_endpoints_match_nats_server(case, tmp_path):
    ports = {"c": free_port(), "r": free_port(), "g": free_port(), "l": free_port()}
    conf = CASES[case] % ports
    paths = ["routez", "routez?subs=1", "gatewayz", "gatewayz?accs=1", "leafz", "leafz?subs=1"]
    ours = endpoints(None, conf, tmp_path, paths)
    theirs = endpoints([GO_SERVER], conf, tmp_path, paths)
    assert ours == theirs
    if "gateway" in conf:
        assert ours["gatewayz"]["name"] == "C1" and ours["gatewayz"]["port"] == ports["g"]
