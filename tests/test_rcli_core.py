"""``rillet pub|sub|req|reply`` and the connection failures, as subprocesses against a live server."""
from __future__ import annotations

import json
import os

from tests.helpers import free_port
from tests.test_rcli_support import cli, server, url_with  # noqa: F401  (fixtures)


def test_pub_sub_with_headers_templates_and_count(cli):
    sub = cli.start("sub", "core.>", "--count", "3")
    try:
        sub.wait_for("Subscribing on core.>")
        out = cli.ok("pub", "core.a", "n={{Count}}", "-H", "K1:v1", "--count", "2")
        assert out.count('Published 3 bytes to "core.a"') == 2
        cli.ok("pub", "core.b.c", "last")
        r = sub.finish()
    finally:
        sub.kill()
    assert r.rc == 0, r
    assert '[#1] Received on "core.a"' in r.out and "K1: v1" in r.out and "n=1" in r.out
    assert '[#2] Received on "core.a"' in r.out and "n=2" in r.out
    assert '[#3] Received on "core.b.c"' in r.out and "last" in r.out


def test_pub_body_from_stdin_and_raw_sub(cli):
    sub = cli.start("sub", "raw.x", "--count", "1", "--raw")
    try:
        import time
        time.sleep(0.8)  # --raw prints nothing before messages: give the subscription time
        cli.ok("pub", "raw.x", input="from stdin")
        r = sub.finish()
    finally:
        sub.kill()
    assert r.out.strip() == "from stdin"


def test_sub_queue_and_dump(cli, tmp_path):
    d = tmp_path / "dump"
    sub = cli.start("sub", "dump.*", "--queue", "q1", "--count", "2", "--dump", str(d))
    try:
        sub.wait_for("Subscribing on dump.* in queue group 'q1'")
        cli.ok("pub", "dump.one", "first", "-H", "A:b")
        cli.ok("pub", "dump.two", "second")
        r = sub.finish()
    finally:
        sub.kill()
    assert r.rc == 0, r
    recs = [json.loads((d / f"{i}.json").read_text()) for i in (1, 2)]
    assert recs[0]["subject"] == "dump.one" and recs[0]["data"] == "first" and recs[0]["headers"] == {"A": "b"}
    assert recs[1]["subject"] == "dump.two" and recs[1]["data"] == "second"


def test_req_reply_fixed_body_and_headers(cli):
    rep = cli.start("reply", "svc.time", "pong {{Count}}", "--count", "2", "-H", "Svc:t")
    try:
        rep.wait_for('Listening on "svc.time"')
        out = cli.ok("req", "svc.time", "hello", "-H", "Trace:1")
        assert 'Sending request on "svc.time"' in out and "Received with rtt" in out
        assert "pong 1" in out and "Svc: t" in out
        assert cli.ok("req", "svc.time", "again", "--raw").strip() == "pong 2"
        r = rep.finish()
    finally:
        rep.kill()
    assert r.rc == 0 and '[#1] Received on subject "svc.time"' in r.out and "Trace: 1" in r.out
    assert "again" in r.out


def test_reply_echo_and_command(cli):
    echo = cli.start("reply", "svc.echo", "--echo", "--count", "1")
    upper = cli.start("reply", "svc.upper", "--command", "tr a-z A-Z", "--count", "1")
    try:
        echo.wait_for("Listening")
        upper.wait_for("Listening")
        assert cli.ok("req", "svc.echo", "same back", "--raw").strip() == "same back"
        assert cli.ok("req", "svc.upper", "shout", "--raw").strip() == "SHOUT"
        assert echo.finish().rc == 0 and upper.finish().rc == 0
    finally:
        echo.kill()
        upper.kill()


def test_req_many_replies(cli):
    reps = [cli.start("reply", "svc.all", f"r{i}", "--queue", f"g{i}", "--count", "1") for i in range(2)]
    try:
        for r in reps:
            r.wait_for("Listening")
        out = cli.ok("req", "svc.all", "who", "--replies", "0", "--timeout", "1s", "--raw")
        assert sorted(out.split()) == ["r0", "r1"]
    finally:
        for r in reps:
            r.kill()


def test_req_no_responders_and_timeout(cli):
    assert cli.fails("req", "nobody.home", "x") == "no responders are available"
    silent = cli.start("sub", "silent.svc")
    try:
        silent.wait_for("Subscribing")
        assert cli.fails("req", "silent.svc", "x", "--timeout", "300ms") == "timeout"
    finally:
        silent.kill()


def test_permission_refused(cli, server):
    limited = url_with(server, "limited", "l")
    err = cli.fails("pub", "secret.plans", "x", "--server", limited)
    assert err.lower() == 'permissions violation for publish to "secret.plans"'
    err = cli.fails("sub", "secret.>", "--server", limited)
    assert err.lower() == 'permissions violation for subscription to "secret.>"'


def test_unreachable_server_and_bad_credentials(cli, server):
    port = free_port()
    err = cli.fails("pub", "x", "y", "--server", f"nats://127.0.0.1:{port}")
    assert err == f"could not connect to nats://127.0.0.1:{port}: connection refused"
    err = cli.fails("pub", "x", "y", "--user", "a", "--password", "wrong")
    assert err.endswith("Authorization Violation")
    # NATS_URL from the environment is what the runner uses; a bad one fails the same way
    r = cli("pub", "x", "y", env={"NATS_URL": f"127.0.0.1:{port}"})
    assert r.rc == 1 and "connection refused" in r.err


def test_usage_errors_are_short(cli):
    r = cli("pub")
    assert r.rc == 2 and "Missing argument" in r.err and "Traceback" not in r.err
    assert cli.fails("pub", "x", "y", "-H", "novalue") == "invalid header 'novalue': use KEY:VALUE"
    assert cli.fails("pub", "x", "y", "--timeout", "soon") == "invalid duration 'soon'"
    assert "could not parse template" in cli.fails("pub", "x", "{{Nope}}")


def test_help_has_examples_everywhere(cli):
    from rillet.cli.main import build_command

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, path + [name])

    root = build_command()
    missing = []
    for path, cmd in walk(root, []):
        if getattr(cmd, "commands", None) or not path or cmd.hidden:
            continue
        if path == ["server", "run"]:
            continue
        text = cmd.help or ""
        if "Example" not in text or "rillet " not in text:
            missing.append(" ".join(path))
    assert missing == []
    out = cli.ok("stream", "add", "--help")
    assert "Examples:" in out and "--config" in out and "--server" in out and "--creds" in out


def test_connection_flags_anywhere(cli, server):
    good = url_with(server, "a", "a")
    bad = f"nats://127.0.0.1:{free_port()}"
    # after the command and before it; the command-level value wins over the root one
    cli.ok("pub", "x", "y", "--server", good, env={"NATS_URL": bad})
    cli.ok("--server", good, "pub", "x", "y", env={"NATS_URL": bad})
    cli.ok("--server", bad, "pub", "--server", good, "x", "y")


def test_shell_completion_script(cli):
    # the shell is named, not detected from the parent processes (which differ between a terminal and CI)
    r = cli("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert r.rc == 0 and "_RILLET_COMPLETE" in r.out.upper(), r
    r = cli(env={"_RILLET_COMPLETE": "complete_bash", "COMP_WORDS": "rillet str", "COMP_CWORD": "1"})
    assert r.rc == 0 and "stream" in r.out, r


def test_server_flags_go_to_the_server(cli):
    r = cli("server", "--version")
    assert r.rc == 0 and "nats-server: v" in r.out, r
    r = cli("server", "-h")
    assert r.rc == 0 and "Usage: rillet-server" in r.out and "--jetstream" in r.out, r
    r = cli("server", "run", "--help")
    assert r.rc == 0 and "Usage: rillet-server" in r.out


def test_server_flag_parsing_does_not_load_the_client_side():
    # `rillet server` must stay light: neither typer/rich nor nats-py is imported
    import subprocess
    import sys
    code = ("import sys; from rillet.cli.main import main; rc = main(['server', '--version']); "
            "print(sorted(m for m in ('typer', 'rich', 'nats', 'click') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ).stdout
    assert out.strip().endswith("[]"), out
