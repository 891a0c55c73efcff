"""``rillet server ping|list|info|check`` and ``rillet bench`` against a live server."""
from __future__ import annotations

import json

from tests.helpers import free_port
from tests.test_rcli_support import cli, server, url_with  # noqa: F401  (fixtures)


def test_server_ping_list_info_as_system_user(cli, server):
    sys_url = url_with(server, "sys", "sys")
    out = cli.ok("server", "ping", "--server", sys_url, "--expect", "1")
    assert out.startswith("rcli") and "rtt=" in out and "1 replies" in out
    rows = json.loads(cli.ok("server", "list", "--server", sys_url, "--json", "--expect", "1"))
    assert rows[0]["server"]["name"] == "rcli" and rows[0]["statsz"]["connections"] >= 1
    table = cli.ok("server", "list", "--server", sys_url, "--expect", "1")
    assert "Server Overview (1 servers)" in table and "rcli" in table
    info = cli.ok("server", "info", "--server", sys_url)
    assert "Server information for rcli" in info and "Maximum Payload: 1.0 MiB" in info
    varz = json.loads(cli.ok("server", "info", "rcli", "--server", sys_url, "--json"))
    assert varz["server_name"] == "rcli"
    assert json.loads(cli.ok("server", "info", varz["server_id"], "--server", sys_url, "--json")
                      )["server_id"] == varz["server_id"]


def test_server_commands_explain_the_system_account(cli):
    err = cli.fails("server", "ping", "--timeout", "1s")
    assert err == ("no servers answered on the $SYS API: these commands need a user of the system account "
                   "(for example --context sys, or --user/--password of a system account user)")


def test_server_check_connection(cli):
    r = cli("server", "check", "connection")
    assert r.rc == 0 and r.out.startswith("OK Connection OK:connected to ") and "connect_time=" in r.out, r
    r = cli("server", "check", "connection", "--rtt-warning", "0s", "--rtt-critical", "10s")
    assert r.rc == 1 and r.out.startswith("WARNING Connection") and "WARN:rtt time" in r.out, r
    r = cli("server", "check", "connection", "--server", f"nats://127.0.0.1:{free_port()}")
    assert r.rc == 2 and r.out.startswith("CRITICAL Connection CRIT:could not connect"), r


def test_bench_pub_with_subscriber(cli):
    out = cli.ok("bench", "pub", "bench.a", "--msgs", "20000", "--size", "64", "--clients", "2", "--sub", "1")
    assert "Pub stats:" in out and "Sub stats:" in out and "msgs/sec" in out and "MB/sec" in out
    data = json.loads(cli.ok("bench", "pub", "bench.a", "--msgs", "5000", "--size", "16", "--sub", "2", "--json"))
    assert data["pub"]["msgs"] == 5000 and data["sub"]["msgs"] == 10000 and data["sub"]["clients"] == 2
    assert data["pub"]["bytes"] == 5000 * 16 and data["pub"]["msgs_per_sec"] > 0


def test_bench_sub_then_pub(cli):
    sub = cli.start("bench", "sub", "bench.b", "--msgs", "10000", "--clients", "2", "--json")
    try:
        sub.wait_for("Waiting for 10,000 messages on bench.b with 2 subscribers")
        cli.ok("bench", "pub", "bench.b", "--msgs", "10000", "--size", "8")
        r = sub.finish()
    finally:
        sub.kill()
    assert r.rc == 0, r
    data = json.loads(r.out[r.out.index("{"):])
    assert data["msgs"] == 20000 and data["clients"] == 2 and data["bytes"] == 20000 * 8


def test_bench_request_reply(cli):
    rep = cli.start("bench", "reply", "bench.svc", "--clients", "2", "--msgs", "600")
    try:
        rep.wait_for("Replying on bench.svc with 2 responders")
        data = json.loads(cli.ok("bench", "request", "bench.svc", "--msgs", "600", "--clients", "3", "--json"))
        r = rep.finish()
    finally:
        rep.kill()
    assert r.rc == 0 and "Replied to 600 requests" in r.out, r
    assert data["msgs"] == 600 and data["clients"] == 3
    lat = data["latency_us"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    out = cli.ok("bench", "request", "bench.local", "--msgs", "200", "--local-reply")
    assert "Request stats:" in out and "p50" in out and "p99" in out
    assert cli.fails("bench", "request", "bench.none", "--msgs", "5") == \
        "no responders on bench.none: start 'rillet bench reply bench.none' first"


def test_bench_jetstream_and_kv(cli):
    data = json.loads(cli.ok("bench", "js", "pub", "bench.js", "--create", "--stream", "BJS", "--msgs", "3000",
                             "--async", "200", "--clients", "2", "--json"))
    assert data["msgs"] == 3000
    info = json.loads(cli.ok("stream", "info", "BJS", "--json"))
    assert info["state"]["messages"] == 3000
    data = json.loads(cli.ok("bench", "js", "consume", "--stream", "BJS", "--msgs", "3000", "--batch", "250",
                             "--json"))
    assert data["msgs"] == 3000
    data = json.loads(cli.ok("bench", "js", "consume", "--stream", "BJS", "--msgs", "1000", "--acks",
                             "--clients", "2", "--json"))
    assert data["msgs"] == 1000
    assert cli.fails("bench", "js", "consume", "--stream", "BJS", "--msgs", "5000") == \
        "stream BJS holds 3000 messages, fewer than --msgs 5000"
    assert cli.fails("bench", "js", "pub", "nostream.here", "--msgs", "10") == \
        "publish failed: no responders (is a stream on the subject?)"
    cli.ok("stream", "rm", "BJS", "-f")
    put = json.loads(cli.ok("bench", "kv", "put", "--bucket", "BKV", "--msgs", "300", "--clients", "2",
                            "--keys", "50", "--json"))
    assert put["msgs"] == 300 and "p99" in put["latency_us"]
    get = json.loads(cli.ok("bench", "kv", "get", "--bucket", "BKV", "--msgs", "300", "--keys", "50", "--json"))
    assert get["msgs"] == 300
    assert cli.ok("kv", "keys", "BKV").split() == sorted(f"k{i}" for i in range(50))
    cli.ok("kv", "rm", "BKV", "-f")


def test_bench_sub_queue_group_shares_the_messages(cli):
    sub = cli.start("bench", "sub", "bench.q", "--msgs", "6000", "--clients", "3", "--queue", "workers", "--json")
    try:
        sub.wait_for("Waiting for 6,000 messages on bench.q with 3 subscribers in queue group workers")
        cli.ok("bench", "pub", "bench.q", "--msgs", "6000", "--size", "4")
        r = sub.finish()
    finally:
        sub.kill()
    assert r.rc == 0, r
    data = json.loads(r.out[r.out.index("{"):])
    assert data["msgs"] == 6000 and 1 <= data["clients"] <= 3
