"""``rillet context``: saved settings, selection, and what a context contributes to connections."""
from __future__ import annotations

import json
import os

from tests.helpers import free_port
from tests.test_rcli_support import cli, server, url_with  # noqa: F401  (fixtures)


def test_context_add_ls_select_show_rm(cli):
    out = cli.ok("context", "add", "one", "--server", "nats://h1:4222", "--user", "u", "--password", "p",
                 "--description", "first")
    assert 'Saved context "one"' in out and 'Selected context "one"' in out  # the first one is selected
    cli.ok("context", "add", "two", "--server", "nats://h2:4222", "--token", "t0k")
    path = os.path.join(cli.config_dir, "context", "one.json")
    saved = json.load(open(path))
    assert saved == {"description": "first", "url": "nats://h1:4222", "user": "u", "password": "p"}
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"

    listing = json.loads(cli.ok("context", "ls", "--json"))
    assert [(c["name"], c["selected"]) for c in listing] == [("one", True), ("two", False)]
    table = cli.ok("context", "ls")
    assert "one*" in table and "two" in table and "nats://h2:4222" in table

    assert 'Selected context "two"' in cli.ok("context", "select", "two")
    shown = json.loads(cli.ok("context", "show", "--json"))
    assert shown["name"] == "two" and shown["token"] == "*********" and shown["url"] == "nats://h2:4222"
    text = cli.ok("context", "show", "one")
    assert "Server URLs: nats://h1:4222" in text and "Username: u" in text and "Password: *********" in text

    assert cli.fails("context", "rm", "two") == \
        "Really remove context two needs confirmation: add --force to do it without a prompt"
    cli.ok("context", "rm", "two", "-f")
    assert cli.fails("context", "show") == \
        "no context selected: give a context name or select one with 'rillet context select'"
    assert cli.fails("context", "select", "nope") == "unknown context 'nope'"
    assert cli.fails("context", "add", "../evil").startswith("invalid context name")


def test_context_supplies_server_and_credentials(cli, server):
    bad = f"nats://127.0.0.1:{free_port()}"
    cli.ok("context", "add", "sys", "--server", server.client_url, "--user", "sys", "--password", "sys")
    cli.ok("context", "add", "app", "--server", server.client_url)
    env = {"NATS_URL": ""}
    # the sys context's user reaches the $SYS API; the app context (no-auth user) gets the guidance
    out = cli.ok("--context", "sys", "server", "ping", env=env)
    assert "rcli" in out and "ping statistics" in out
    err = cli.fails("server", "ping", "--context", "app", "--timeout", "1s", env=env)
    assert err.startswith("no servers answered on the $SYS API: these commands need a user of the system account")
    # NATS_CONTEXT picks a context, flags override its fields
    out = cli.ok("server", "list", "--json", env={**env, "NATS_CONTEXT": "sys"})
    assert json.loads(out)[0]["server"]["name"] == "rcli"
    assert "connection refused" in cli.fails("server", "list", "--context", "sys", "--server", bad, env=env)
    # environment variables override the context too
    err = cli.fails("server", "list", "--context", "sys", env={**env, "NATS_PASSWORD": "wrong"})
    assert err.endswith("Authorization Violation")
    assert cli.fails("pub", "x", "y", "--context", "missing") == "unknown context 'missing'"


def test_selected_context_is_used_without_flags(cli, server):
    cli.ok("context", "add", "sysctx", "--server", url_with(server, "sys", "sys"), "--select")
    info = json.loads(cli.ok("server", "info", "--json", env={"NATS_URL": ""}))
    assert info["server_name"] == "rcli" and info["system_account"] == "SYS"


def test_xdg_config_home(cli, tmp_path):
    env = {"RILLET_CONFIG_DIR": "", "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    cli.ok("context", "add", "x", "--server", "nats://h:1", env=env)
    assert os.path.exists(tmp_path / "xdg" / "rillet" / "context" / "x.json")
