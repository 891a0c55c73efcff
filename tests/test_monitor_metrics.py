"""``/metrics``: the monitoring endpoints under prometheus-nats-exporter's names, scraped with the
``prometheus_client`` parser; the same families and labels as the exporter makes of nats-server's JSON.
Single servers come from the rillet pytest plugin (``rillet_server_factory``) where the test only talks to
them over the network."""
from __future__ import annotations

import asyncio
import io
import json
import tempfile
import time
import urllib.request
from typing import Any

import nats
from prometheus_client.parser import text_string_to_metric_families

from helpers import ServerProcess, free_port
from rillet.app.embed import run_cluster, run_server, run_super_cluster
from rillet.config.flags import parse_command_line
from rillet.config.options import Options
from rillet.config.options_builder import load_string
from rillet.monitor import metrics
from rillet.server.logging import Logger


def http_get(port: int, path: str) -> tuple[int, dict, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


async def aget(port: int, path: str) -> tuple[int, dict, str]:
    return await asyncio.get_running_loop().run_in_executor(None, http_get, port, path)


async def scrape(port: int) -> dict[str, Any]:
    """{family name: family} of one scrape, through prometheus_client's parser."""
    code, headers, text = await aget(port, "/metrics")
    assert code == 200, text
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict, family: str, **labels: str) -> float:
    fam = fams[family]
    hits = [s.value for s in fam.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (family, labels, fam.samples)
    return hits[0]


def label_names(fams: dict) -> dict[str, list[str]]:
    return {n: sorted(f.samples[0].labels) if f.samples else [] for n, f in fams.items()}


async def drive(url: str) -> Any:
    """A stream with 5 messages, a pull consumer with 2 acknowledged, a plain subscription."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="ORDERS", subjects=["orders.>"])
    for i in range(5):
        await js.publish(f"orders.{i % 2}", b"x" * 10)
    await js.add_consumer("ORDERS", durable_name="WORK", description="the workers")
    sub = await js.pull_subscribe("orders.>", durable="WORK")
    for m in await sub.fetch(2):
        await m.ack_sync()
    await nc.subscribe("plain.>")
    await nc.flush()
    return nc


def test_config_key_and_flag():
    assert load_string("http_metrics: true\nhttp_port: 8222\n").http_metrics is True
    assert load_string("http_port: 8222\n").http_metrics is False
    assert parse_command_line(["-m", "8222", "--http_metrics"]).options.http_metrics is True
    assert parse_command_line(["-m", "8222"]).options.http_metrics is False


async def test_off_unless_enabled_and_says_how(rillet_server_factory):
    srv = rillet_server_factory(http_port=-1, http_host="127.0.0.1").server
    code, _, text = await aget(srv.http_addr[1], "/metrics")
    assert code == 404 and "http_metrics: true" in text and "--http_metrics" in text
    code, _, _ = await aget(srv.http_addr[1], "/varz")
    assert code == 200


async def test_without_monitoring_port_a_warning():
    out = io.StringIO()
    async with run_server(Options(host="127.0.0.1", port=-1, http_metrics=True), log=Logger(out=out)):
        pass
    assert "http_metrics is set but there is no monitoring port" in out.getvalue()


async def test_scrape_values_follow_the_endpoints(rillet_server_factory):
    srv = rillet_server_factory(jetstream=True, http_port=-1, http_host="127.0.0.1", http_metrics=True,
                                server_name="m1").server
    port = srv.http_addr[1]
    nc = await drive(srv.client_url)
    try:
        fams = await scrape(port)
        varz = json.loads((await aget(port, "/varz"))[2])
    finally:
        await nc.close()
    sid = srv.server_id
    for fam in fams.values():  # every sample names the server
        for s in fam.samples:
            assert s.labels["server_id"] == sid, (fam.name, s)
    # /varz, flattened as the exporter's generic collector (numbers; label gauges; times in epoch ms)
    assert value(fams, "gnatsd_varz_connections") == 1
    assert value(fams, "gnatsd_varz_in_msgs") >= 5
    assert value(fams, "gnatsd_varz_max_payload") == varz["max_payload"]
    assert value(fams, "gnatsd_varz_server_name", value="m1") == 1
    assert value(fams, "gnatsd_varz_version", value=varz["version"]) == 1
    assert abs(value(fams, "gnatsd_varz_start") - time.time() * 1000) < 120_000
    assert value(fams, "gnatsd_varz_jetstream_stats_storage") > 0
    assert not any(n.startswith("gnatsd_varz_leaf_") for n in fams)  # the leaf block: skipped by the exporter
    # /connz: the summary collector
    assert value(fams, "gnatsd_connz_num_connections") == 1
    assert value(fams, "gnatsd_connz_total") == 1
    assert value(fams, "gnatsd_connz_limit") == 1024
    assert value(fams, "gnatsd_connz_subscriptions") >= 2
    assert fams["gnatsd_connz_in_msgs"].type == "counter" and value(fams, "gnatsd_connz_in_msgs") >= 5
    # /routez, /leafz, /healthz
    assert value(fams, "gnatsd_routez_num_routes") == 0
    assert value(fams, "gnatsd_subsz_num_subscriptions") >= 2
    assert value(fams, "gnatsd_leafz_conn_nodes_total") == 0
    assert value(fams, "gnatsd_healthz_status") == 0
    assert value(fams, "gnatsd_healthz_status_value", value="ok") == 1
    # /jsz: server, account, stream and consumer families with the exporter's labels
    assert value(fams, "jetstream_server_total_streams") == 1
    assert value(fams, "jetstream_server_total_messages") == 5
    assert value(fams, "jetstream_server_jetstream_disabled") == 0
    st = {"stream_name": "ORDERS", "account": "$G"}
    assert value(fams, "jetstream_stream_total_messages", **st) == 5
    assert value(fams, "jetstream_stream_last_seq", **st) == 5
    assert value(fams, "jetstream_stream_subject_count", **st) == 2
    assert value(fams, "jetstream_stream_limit_messages", **st) == -1
    assert value(fams, "jetstream_account_storage_used", account="$G") > 0
    co = {**st, "consumer_name": "WORK", "consumer_desc": "the workers"}
    assert value(fams, "jetstream_consumer_num_pending", **co) == 3
    assert value(fams, "jetstream_consumer_delivered_stream_seq", **co) == 2
    assert value(fams, "jetstream_consumer_ack_floor_stream_seq", **co) == 2
    assert value(fams, "jetstream_consumer_num_ack_pending", **co) == 0
    assert 0 <= value(fams, "jetstream_consumer_last_ack_seconds", **co) < 60
    sample = fams["jetstream_consumer_num_pending"].samples[0].labels
    assert sample["server_name"] == "m1" and sample["is_meta_leader"] == "true"


async def test_gateways_and_leafnodes():
    async with run_super_cluster(2, 1, http_port=-1, http_host="127.0.0.1", http_metrics=True) as (a, b):
        a0 = a[0]
        deadline = time.monotonic() + 10
        while True:
            fa = await scrape(a0.http_addr[1])
            if "gnatsd_gatewayz_outbound_gateway_configured" in fa and \
                    "gnatsd_gatewayz_inbound_gateway_conn_in_msgs" in fa:
                break
            assert time.monotonic() < deadline, sorted(fa)
            await asyncio.sleep(0.1)
        gw = json.loads((await aget(a0.http_addr[1], "/gatewayz"))[2])
        local, remote = gw["name"], next(iter(gw["outbound_gateways"]))
        out = gw["outbound_gateways"][remote]["connection"]
        lab = {"gateway_name": local, "remote_gateway_name": remote, "cid": str(out["cid"])}
        assert value(fa, "gnatsd_gatewayz_outbound_gateway_configured", **lab) in (0, 1)
        start = value(fa, "gnatsd_gatewayz_outbound_gateway_conn_start_time_seconds", **lab)
        assert abs(start - time.time()) < 120
        assert value(fa, "gnatsd_gatewayz_outbound_gateway_conn_uptime_seconds", **lab) >= 0
        assert sorted(fa["gnatsd_gatewayz_inbound_gateway_conn_rtt"].samples[0].labels) == \
            ["cid", "gateway_name", "remote_gateway_name", "server_id"]

    hub_opts = load_string('listen: "127.0.0.1:-1"\nserver_name: hub\nhttp: "127.0.0.1:-1"\nhttp_metrics: true\n'
                           'leafnodes { listen: "127.0.0.1:-1" }\n', "hub.conf")
    async with run_server(hub_opts) as hub:
        leaf_opts = load_string(f'listen: "127.0.0.1:-1"\nserver_name: leaf1\nleafnodes {{ remotes [ '
                                f'{{ url: "nats-leaf://127.0.0.1:{hub.leafnodes.addr[1]}" }} ] }}\n', "leaf.conf")
        async with run_server(leaf_opts):
            deadline = time.monotonic() + 10
            while True:
                fh = await scrape(hub.http_addr[1])
                if value(fh, "gnatsd_leafz_conn_nodes_total") == 1 and "gnatsd_leafz_info" in fh:
                    break
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            assert value(fh, "gnatsd_leafz_info", name="leaf1", account="$G", account_id="$G") == 1
            assert sorted(fh["gnatsd_leafz_conn_in_msgs"].samples[0].labels) == \
                ["account", "account_id", "ip", "name", "port", "server_id"]


async def test_routes():
    async with run_cluster(2, http_port=-1, http_host="127.0.0.1", http_metrics=True) as servers:
        deadline = time.monotonic() + 10
        while True:
            fams = await scrape(servers[0].http_addr[1])
            if value(fams, "gnatsd_routez_num_routes") >= 1:
                break
            assert time.monotonic() < deadline, "no route in gnatsd_routez_num_routes"
            await asyncio.sleep(0.1)
        assert value(fams, "gnatsd_varz_routes") >= 1
        assert value(fams, "gnatsd_varz_cluster_name", value=servers[0].opts.cluster.name) == 1


def test_render_escapes_and_formats():
    reg = metrics.Registry()
    reg.add("x_y", 1.5, {"server_id": "S", "value": 'a"b\\c\nd'})
    reg.add("x_y", 2, {"server_id": "S", "value": 'a"b\\c\nd'})  # the first value of a series stays
    reg.add("big", 2 ** 60, {"server_id": "S"})
    text = reg.render()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert fams["x_y"].samples[0].labels["value"] == 'a"b\\c\nd' and fams["x_y"].samples[0].value == 1.5
    assert fams["big"].samples[0].value == float(2 ** 60)
    assert metrics.uptime_ms("1y2d3h4m5s") == ((365 + 2) * 24 * 3600 + 3 * 3600 + 4 * 60 + 5) * 1000
    assert metrics.uptime_ms("250ms") == 250 and metrics.uptime_ms("junk") == -1
    assert metrics.epoch_ms("1970-01-01T00:00:01.5Z") == 1500 and metrics.epoch_ms("never") == -1


# nats-server 2.15 shows jetstream.limits.default_max_consumers (1000) in /varz where Rillet has no such
# default yet (a JetStream matter, not the exporter's names)
KNOWN_VARZ_GAPS = {"gnatsd_varz_jetstream_limits_default_max_consumers"}


async def test_same_families_and_labels_as_the_exporter_makes_of_nats_server(rillet_server_factory):
    """The exporter's view of a Go nats-server (our conversion of its JSON, as the exporter reads it) and
    Rillet's /metrics after the same traffic: the same metric families with the same label names."""
    mp = free_port()
    sd = tempfile.mkdtemp()
    go = ServerProcess("-p", "-1", "-a", "127.0.0.1", "-m", str(mp), "-js", "-sd", sd, command=["nats-server"])
    try:
        await asyncio.get_running_loop().run_in_executor(None, go.wait_ready)
        nc = await drive(f"nats://127.0.0.1:{go.port}")
        try:
            bodies = {n: json.loads((await aget(mp, "/" + n))[2])
                      for n in ("varz", "connz", "routez", "subsz", "gatewayz", "leafz", "healthz")}
            bodies["jsz"] = json.loads((await aget(mp, "/jsz?accounts=true&streams=true&consumers=true"
                                                       "&config=true"))[2])
        finally:
            await nc.close()
    finally:
        go.proc.terminate()
        go.proc.wait(10)
    go_text = metrics.from_endpoints(bodies, bodies["varz"]["server_id"], bodies["varz"]["server_name"]).render()
    go_fams = label_names({f.name: f for f in text_string_to_metric_families(go_text)})

    srv = rillet_server_factory(jetstream=True, http_port=-1, http_host="127.0.0.1", http_metrics=True).server
    nc = await drive(srv.client_url)
    try:
        await aget(srv.http_addr[1], "/varz")  # (as on the Go side: /varz counted in http_req_stats)
        ours = label_names(await scrape(srv.http_addr[1]))
    finally:
        await nc.close()
    missing = set(go_fams) - set(ours) - KNOWN_VARZ_GAPS
    # (Rillet-only /varz numbers, rillet_tasks and rillet_fds, come out as the exporter would make them of Rillet)
    extra = {f for f in set(ours) - set(go_fams) if not f.startswith("gnatsd_varz_rillet_")}
    assert not missing, sorted(missing)
    assert not extra, sorted(extra)
    assert {n: go_fams[n] for n in ours if n in go_fams} == {n: v for n, v in ours.items() if n in go_fams}
    assert any(n.startswith("jetstream_consumer_") for n in ours)
