"""``rillet stream|consumer|account`` against a live JetStream server."""
from __future__ import annotations

import json

from tests.helpers import free_port
from tests.test_rcli_support import cli, fastcli, server, url_with  # noqa: F401  (fixtures)


def test_stream_lifecycle_with_flags(fastcli):
    cli = fastcli
    out = cli.ok("stream", "add", "ORDERS", "--subjects", "orders.>", "--max-age", "1h", "--max-msgs", "1000",
                 "--dupe-window", "30s", "--description", "the orders", "--storage", "memory")
    assert "Stream ORDERS was created" in out and "Subjects: orders.>" in out and "Maximum Age: 1h" in out
    assert "Storage: Memory" in out and "Maximum Messages: 1,000" in out
    for i in range(3):
        assert "stored in stream \"ORDERS\" sequence" in cli.ok("pub", "-J", f"orders.n{i}", f"body{i}",
                                                               "-H", "Src:cli")
    info = json.loads(cli.ok("stream", "info", "ORDERS", "--json"))
    assert info["config"]["max_age"] == 3_600_000_000_000 and info["config"]["duplicate_window"] == 30_000_000_000
    assert info["state"]["messages"] == 3 and info["config"]["description"] == "the orders"
    text = cli.ok("stream", "info", "ORDERS")
    assert "Information for Stream ORDERS" in text and "Messages: 3" in text and "Last Sequence: 3" in text

    out = cli.ok("stream", "edit", "ORDERS", "--max-msgs", "5", "--subjects", "orders.>,returns.>")
    assert "Stream ORDERS was updated" in out and "Subjects: orders.>, returns.>" in out
    assert json.loads(cli.ok("stream", "info", "ORDERS", "--json"))["config"]["max_age"] == 3_600_000_000_000

    assert json.loads(cli.ok("stream", "ls", "--json")) == ["ORDERS"]
    ls = cli.ok("stream", "ls")
    assert "ORDERS" in ls and "the orders" in ls
    assert cli.ok("stream", "ls", "--names").split() == ["ORDERS"]
    rep = cli.ok("stream", "report")
    assert "Stream Report" in rep and "ORDERS" in rep and "Memory" in rep
    assert json.loads(cli.ok("stream", "report", "--json"))[0]["messages"] == 3

    got = cli.ok("stream", "get", "ORDERS", "2")
    assert "Item: ORDERS#2" in got and "on Subject orders.n1" in got and "Src: cli" in got and "body1" in got
    last = json.loads(cli.ok("stream", "get", "ORDERS", "--last-for", "orders.n2", "--json"))
    assert last["seq"] == 3 and last["data"] == "body2" and last["headers"] == {"Src": ["cli"]}

    view = cli.ok("stream", "view", "ORDERS", "2")
    assert view.count("Subject: orders.n") == 3 and "Reached the end of the stream" in view
    assert "body0" in view and "body2" in view
    view = [json.loads(line) for line in cli.ok("stream", "view", "ORDERS", "--id", "2", "--json").splitlines()]
    assert [m["seq"] for m in view] == [2, 3]
    assert cli.ok("stream", "view", "ORDERS", "--subject", "orders.n0", "--raw").split() == ["body0"]

    assert "Removed message 2" in cli.ok("stream", "rmm", "ORDERS", "2", "-f")
    assert cli.fails("stream", "get", "ORDERS", "2") == "no message found"
    assert "Purged 1 messages" in cli.ok("stream", "purge", "ORDERS", "--subject", "orders.n0", "-f")
    assert "Purged 1 messages" in cli.ok("stream", "purge", "ORDERS", "-f")
    assert "No messages" in cli.ok("stream", "view", "ORDERS")
    cli.ok("stream", "rm", "ORDERS", "-f")
    assert cli.ok("stream", "ls") .strip() == "No Streams defined"


def test_stream_from_json_config_like_the_api(fastcli, tmp_path):
    cli = fastcli
    cfg = {"name": "CFGD", "subjects": ["cfgd.*"], "retention": "workqueue", "storage": "file",
           "max_msgs_per_subject": 3, "discard": "new", "allow_direct": True}
    f = tmp_path / "stream.json"
    f.write_text(json.dumps(cfg))
    made = json.loads(cli.ok("stream", "add", "--config", str(f), "--json"))
    for k, v in cfg.items():
        assert made["config"][k] == v
    # --config on edit replaces; a different name on the command line wins over the file's
    cfg2 = dict(cfg, max_msgs_per_subject=7)
    f.write_text(json.dumps(cfg2))
    edited = json.loads(cli.ok("stream", "edit", "CFGD", "--config", str(f), "--json"))
    assert edited["config"]["max_msgs_per_subject"] == 7
    assert json.loads(cli.ok("stream", "add", "COPY", "--config", str(f), "--subjects", "copy.*", "--json")
                      )["config"]["subjects"] == ["copy.*"]
    # the server's own validation errors come back as one line
    f.write_text(json.dumps({"name": "BAD", "subjects": ["cfgd.x"]}))
    err = cli.fails("stream", "add", "--config", str(f))
    assert "subjects overlap with an existing stream" in err
    for name in ("CFGD", "COPY"):
        cli.ok("stream", "rm", name, "-f")


def test_stream_user_errors(cli, tmp_path, server):
    """User mistakes as real subprocesses: one line on stderr, exit status 1, no traceback."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "X", "subjects": [')
    assert cli.fails("stream", "add", "--config", str(bad)).startswith(f"invalid JSON in {bad}:")
    assert cli.fails("stream", "add", "--config", str(tmp_path / "none.json")).startswith("could not read")
    assert cli.fails("stream", "info", "NOPE") == "stream not found"
    assert cli.fails("stream", "view", "NOPE") == "stream not found"
    assert cli.fails("stream", "rm", "NOPE", "-f") == "stream not found"
    assert cli.fails("stream", "add", "S1", "--storage", "tape") == "invalid storage 'tape': use file or memory"
    assert cli.fails("stream", "add", "S1", "--max-age", "forever") == "invalid duration 'forever'"
    assert cli.fails("stream", "add") == "a stream name is required (as an argument or in the --config file)"
    # permission refused on the JetStream API: the server's -ERR, not a bare timeout
    cli.ok("stream", "add", "PERM", "--subjects", "perm.x")
    err = cli.fails("stream", "rm", "PERM", "-f", "--timeout", "1s", "--server", url_with(server, "limited", "l"))
    assert err.lower() == 'permissions violation for publish to "$js.api.stream.delete.perm"'
    cli.ok("stream", "rm", "PERM", "-f")
    # no JetStream for the account: the system account has none
    err = cli.fails("stream", "ls", "--server", url_with(server, "sys", "sys"), "--timeout", "1s")
    assert "JetStream" in err or "jetstream" in err
    assert "connection refused" in cli.fails("stream", "ls", "--server", f"nats://127.0.0.1:{free_port()}")


def test_stream_backup_and_restore(fastcli, tmp_path):
    cli = fastcli
    cli.ok("stream", "add", "BK", "--subjects", "bk.*")
    for i in range(5):
        cli.ok("pub", "bk.x", f"m{i}", "-J", "-q") if i < 2 else None
    cli.ok("pub", "bk.y", "m{{Count}}", "--count", "3", "-q")
    assert json.loads(cli.ok("stream", "info", "BK", "--json"))["state"]["messages"] == 5
    d = tmp_path / "backup"
    out = cli.ok("stream", "backup", "BK", str(d))
    assert "Backed up stream BK: 5 messages" in out
    assert json.load(open(d / "backup.json"))["config"]["name"] == "BK"
    assert cli.fails("stream", "backup", "BK", str(d)) == f"{d} already holds a backup"
    cli.ok("stream", "rm", "BK", "-f")
    out = cli.ok("stream", "restore", str(d))
    assert "Restored stream BK" in out and "Messages: 5" in out
    assert cli.ok("stream", "view", "BK", "--raw").split() == ["m0", "m1", "m1", "m2", "m3"]
    assert "already in use" in cli.fails("stream", "restore", str(d)) or \
        "exists" in cli.fails("stream", "restore", str(d))
    cli.ok("stream", "rm", "BK", "-f")


def test_consumers(fastcli, tmp_path):
    cli = fastcli
    cli.ok("stream", "add", "CS", "--subjects", "cs.>")
    cli.ok("pub", "cs.a", "a{{Count}}", "--count", "4", "-q")
    out = cli.ok("consumer", "add", "CS", "PULL", "--filter", "cs.a", "--ack", "explicit", "--max-deliver", "3",
                 "--wait", "10s", "--description", "puller")
    assert "Consumer PULL on stream CS was created" in out and "Pull Mode: true" in out
    assert "Filter Subject: cs.a" in out and "Ack Wait: 10s" in out and "Maximum Deliveries: 3" in out
    got = cli.ok("consumer", "next", "CS", "PULL")
    assert "subj: cs.a / stream seq 1 / consumer seq 1" in got and "a1" in got and "Acknowledged message" in got
    assert cli.ok("consumer", "next", "CS", "PULL", "--count", "2", "--raw").split() == ["a2", "a3"]
    info = json.loads(cli.ok("consumer", "info", "CS", "PULL", "--json"))
    assert info["delivered"]["stream_seq"] == 3 and info["num_pending"] == 1 and info["num_ack_pending"] == 0
    assert "Unprocessed Messages: 1" in cli.ok("consumer", "info", "CS", "PULL")
    cli.ok("consumer", "edit", "CS", "PULL", "--max-deliver", "9")
    assert json.loads(cli.ok("consumer", "info", "CS", "PULL", "--json"))["config"]["max_deliver"] == 9

    f = tmp_path / "c.json"
    f.write_text(json.dumps({"stream_name": "CS", "config": {"durable_name": "PUSH", "deliver_subject": "push.cs",
                                                             "ack_policy": "explicit", "deliver_policy": "last"}}))
    made = json.loads(cli.ok("consumer", "add", "CS", "--config", str(f), "--json"))
    assert made["name"] == "PUSH" and made["config"]["deliver_subject"] == "push.cs"
    assert cli.ok("consumer", "ls", "CS", "--names").split() == ["PULL", "PUSH"]
    assert json.loads(cli.ok("consumer", "ls", "CS", "--json")) == ["PULL", "PUSH"]
    table = cli.ok("consumer", "ls", "CS")
    assert "puller" in table and "PUSH" in table
    rep = cli.ok("consumer", "report", "CS")
    assert "Consumer report for CS with 2 consumers" in rep and "Push" in rep and "Pull" in rep
    assert {c["consumer"]: c["mode"] for c in json.loads(cli.ok("consumer", "report", "CS", "--json"))} == \
        {"PULL": "pull", "PUSH": "push"}
    sub = cli.ok("consumer", "sub", "CS", "PUSH", "--count", "1", "--raw", timeout=15)
    assert sub.split() == ["a4"]
    assert cli.ok("consumer", "sub", "CS", "PULL", "--count", "1", "--raw").split() == ["a4"]

    assert cli.fails("consumer", "next", "CS", "PULL", "--wait", "200ms") == "no message received: timeout"
    assert cli.fails("consumer", "next", "CS", "PUSH") == \
        "consumer PUSH is a push consumer: use 'rillet consumer sub'"
    assert cli.fails("consumer", "info", "CS", "NOPE") == "consumer not found"
    assert cli.fails("consumer", "ls", "NOPE") == "stream not found"
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert cli.fails("consumer", "add", "CS", "--config", str(bad)).startswith("invalid JSON in")
    assert cli.fails("consumer", "add", "CS", "X", "--ack", "sometimes") == \
        "invalid ack policy 'sometimes': use none, all or explicit"
    assert "Deleted consumer PULL" in cli.ok("consumer", "rm", "CS", "PULL", "-f")
    cli.ok("stream", "rm", "CS", "-f")


def test_account_info(fastcli, server):
    cli = fastcli
    cli.ok("stream", "add", "ACC", "--subjects", "acc.x")
    out = cli.ok("account", "info")
    assert "Connected Server Name: rcli" in out and "Streams: 1 of unlimited" in out
    data = json.loads(cli.ok("account", "info", "--json"))
    assert data["connection"]["server_name"] == "rcli" and data["jetstream"]["streams"] == 1
    # an account without JetStream still gets its connection details
    data = json.loads(cli.ok("account", "info", "--json", "--timeout", "1s",
                             "--server", url_with(server, "sys", "sys")))
    assert data["jetstream"] is None and data["jetstream_error"]
    cli.ok("stream", "rm", "ACC", "-f")
