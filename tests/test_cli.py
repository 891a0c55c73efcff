"""The command line, log output and signals of the server process, compared with nats-server's.

Runs ``python -m rillet.server`` (``nats-server`` with RILLET_TEST_TARGET=nats-server) as a subprocess.
"""
from __future__ import annotations

import asyncio
import glob
import json
import os
import re
import signal
import socket
import time

import nats
import pytest

from helpers import GO, RawClient, ServerProcess, free_port, run_command

LOG_LINE = re.compile(r"^\[(\d+)\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} \[(INF|DBG|TRC|WRN|ERR|FTL)\] ")


def start(*args: str, **kw) -> ServerProcess:
    """Start the server and wait until it serves: "Server is ready", then one INFO read over a socket.

    The INFO round trip makes sure start-up has finished (signal handlers included) before a test
    sends signals; ``test_signal_right_after_ready_is_trapped`` checks the moment of the log line itself.
    """
    proc = ServerProcess(*args, **kw).wait_ready()
    with socket.create_connection(("127.0.0.1", proc.port), timeout=5) as s:
        assert s.recv(5) == b"INFO "
    return proc


@pytest.fixture
def conf(tmp_path):
    """Write a config file and return its path."""
    def write(text: str, name: str = "server.conf") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


# ---------------------------------------------------------------------------------------------------
# Listening, names, ports file, log format


async def test_random_port_ports_file_and_log_lines(tmp_path):
    with start("-p", "-1", "-a", "127.0.0.1", "--ports_file_dir", str(tmp_path)) as proc:
        assert proc.host == "127.0.0.1" and proc.port > 0
        lines = proc.output.splitlines()
        listening = [l for l in lines if "Listening for client connections on" in l]
        assert len(listening) == 1
        assert listening[0].endswith(f"[INF] Listening for client connections on 127.0.0.1:{proc.port}")
        ready = [l for l in lines if l.endswith("[INF] Server is ready")]
        assert len(ready) == 1
        for line in (listening[0], ready[0]):
            m = LOG_LINE.match(line)
            assert m, line
            assert int(m.group(1)) == proc.pid
        assert any(l.endswith("[INF] Starting nats-server") for l in lines)

        for _ in range(100):  # nats-server writes it right after "Server is ready"
            files = glob.glob(str(tmp_path / f"*_{proc.pid}.ports"))
            if files:
                break
            await asyncio.sleep(0.02)
        assert len(files) == 1, os.listdir(tmp_path)
        with open(files[0]) as f:
            ports = json.load(f)
        assert ports == {"nats": [f"nats://127.0.0.1:{proc.port}"]}

        c = await RawClient.open(proc.port)
        assert c.info["port"] == proc.port
        assert c.info["host"] == "127.0.0.1"
        assert await c.ping() == b""
        await c.close()
        proc.send_signal(signal.SIGTERM)
        assert await proc.await_exit() == 0
    # the ports file goes away with the server
    assert glob.glob(str(tmp_path / f"*_{proc.pid}.ports")) == []


async def test_fixed_port_and_name():
    port = free_port()
    with start("-a", "127.0.0.1", "-p", str(port), "-n", "cli-name") as proc:
        assert proc.port == port
        assert re.search(r"\[INF\]   Name:\s+cli-name$", proc.output, re.M), proc.output
        c = await RawClient.open(port, connect=False)
        assert c.info["server_name"] == "cli-name"
        assert c.info["server_id"] != "cli-name"
        await c.close()
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        assert nc.is_connected
        await nc.close()


async def test_long_flag_spellings():
    with start("--addr=127.0.0.1", "--port=-1", "--server_name", "long-name") as proc:
        c = await RawClient.open(proc.port, connect=False)
        assert c.info["server_name"] == "long-name"
        await c.close()


# ---------------------------------------------------------------------------------------------------
# Commands that exit: version, help, bad flags, -t


@pytest.mark.parametrize("args", [["-v"], ["--version"], ["version"]])
def test_version(args):
    r = run_command(*args)
    assert r.returncode == 0
    assert re.match(r"^nats-server: v\d+\.\d+\.\d+", r.stdout), (r.stdout, r.stderr)


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["help"]])
def test_help(args):
    r = run_command(*args)
    assert r.returncode == 0
    assert "Usage:" in r.stdout
    for flag in ("-p, --port", "-a, --addr", "-c, --config", "-sl,--signal", "--ports_file_dir"):
        assert flag in r.stdout, flag


def test_bad_flag_message():
    r = run_command("--bogus", timeout=10)
    assert "flag provided but not defined: -bogus" in r.stderr
    assert "Server is ready" not in r.stderr + r.stdout


def test_bad_flag_exit_status_matches_nats_server():
    # nats-server's usage function exits 0, also after "flag provided but not defined", and shows the usage
    r = run_command("--bogus", timeout=10)
    assert "Usage:" in r.stdout
    assert r.returncode == 0


def test_bad_flag_value():
    r = run_command("-p", "notanumber", timeout=10)
    assert "invalid value \"notanumber\" for flag -p" in r.stderr
    assert "Server is ready" not in r.stderr + r.stdout


def test_check_good_config(conf):
    path = conf("port: 4222\nmax_payload: 2MB\nauthorization { user: a, password: b }\n")
    r = run_command("-t", "-c", path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^nats-server: configuration file \S*server\.conf is valid", r.stderr, re.M), r.stderr


@pytest.mark.parametrize("text, line, col, message", [
    ("port: 4222\nunknown_field_x: 1\n", 2, 1, 'unknown field "unknown_field_x"'),
    ('port: 4222\nlame_duck_duration: "2s"\n', 2, 1, "invalid lame_duck_duration of 2s, minimum is 30 seconds"),
    ("port: 4222\nauthorization {\n  users = [ {user: a, password: b, bogus_key: 1} ]\n}\n", 3, None,
     'unknown field "bogus_key"'),
], ids=["unknown-field", "lame-duck-minimum", "nested-unknown-field"])
@pytest.mark.parametrize("check_only", [True, False], ids=["-t", "run"])
def test_bad_config_names_file_line_col(conf, text, line, col, message, check_only):
    path = conf(text, "bad.conf")
    args = ["-t", "-c", path] if check_only else ["-c", path, "-p", "-1", "-a", "127.0.0.1"]
    r = run_command(*args, timeout=10)
    assert r.returncode != 0
    pos = rf"{line}:{col}" if col else rf"{line}:\d+"
    assert re.search(rf"bad\.conf:{pos}: " + re.escape(message), r.stderr), r.stderr
    assert "Server is ready" not in r.stderr


def test_config_durations(conf):
    path = conf('port: 4222\nping_interval: "2m"\nwrite_deadline: "1.5s"\nlame_duck_duration: "1m30s"\n'
                'lame_duck_grace_period: "500ms"\nauthorization { token: abc, timeout: 0.5 }\n')
    r = run_command("-t", "-c", path)
    assert r.returncode == 0, r.stderr


def test_config_invalid_duration(conf):
    path = conf('port: 4222\nping_interval: "abc"\n', "dur.conf")
    r = run_command("-t", "-c", path)
    assert r.returncode != 0
    assert re.search(r'dur\.conf:2:1: error parsing ping_interval: time: invalid duration "abc"', r.stderr), r.stderr


async def test_config_integer_duration_is_a_warning(conf):
    # -t treats the warning as an error; a real start only warns
    path = conf("listen: 127.0.0.1:-1\nping_interval: 30\n", "int.conf")
    r = run_command("-t", "-c", path)
    assert r.returncode != 0
    assert re.search(r'int\.conf:2:1: invalid use of field "ping_interval": '
                     r"ping_interval should be converted to a duration", r.stderr), r.stderr
    with start("-c", path) as proc:
        c = await RawClient.open(proc.port)
        assert await c.ping() == b""
        await c.close()


def test_config_syntax_error_refused(conf):
    path = conf("port: 4222\nfoo {\n  bar: [1, 2\n", "broken.conf")
    r = run_command("-t", "-c", path, timeout=10)
    assert r.returncode != 0
    assert "line 4" in r.stderr or "broken.conf:4:" in r.stderr, r.stderr


def test_missing_config_file(tmp_path):
    r = run_command("-c", str(tmp_path / "nope.conf"), timeout=10)
    assert r.returncode != 0
    assert "nope.conf" in r.stderr


# ---------------------------------------------------------------------------------------------------
# pid file, log file, debug and trace


async def test_pid_file(tmp_path):
    pid_file = tmp_path / "server.pid"
    with start("-p", "-1", "-a", "127.0.0.1", "-P", str(pid_file)) as proc:
        assert pid_file.read_text().strip() == str(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert await proc.await_exit() == 0


async def test_log_file(tmp_path):
    log = tmp_path / "server.log"
    proc = ServerProcess("-p", "-1", "-a", "127.0.0.1", "-l", str(log))
    with proc:
        deadline = time.monotonic() + 15
        text = ""
        while "Server is ready" not in text and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            text = log.read_text() if log.exists() else ""
        assert "[INF] Server is ready" in text, proc.output
        m = re.search(r"Listening for client connections on 127\.0\.0\.1:(\d+)", text)
        assert m
        assert all(LOG_LINE.match(l) for l in text.splitlines()), text
        # nothing of the log goes to the terminal
        assert "Server is ready" not in proc.output
        proc.send_signal(signal.SIGTERM)
        assert await proc.await_exit() == 0
    assert "Server Exiting.." in log.read_text()


async def test_debug_and_trace_lines():
    with start("-p", "-1", "-a", "127.0.0.1", "-DV") as proc:
        mark = proc.mark()
        c = await RawClient.open(proc.port)
        c.send(b"SUB foo 1\r\n")
        assert await c.ping() == b""
        await proc.await_log(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - Client connection created", timeout=3, after=mark)
        await proc.await_log(r"\[TRC\] 127\.0\.0\.1:\d+ - cid:\d+ - .*<<- \[CONNECT \{", timeout=3, after=mark)
        await proc.await_log(r"\[TRC\] 127\.0\.0\.1:\d+ - cid:\d+ - .*<<- \[PING\]", timeout=3, after=mark)
        await proc.await_log(r"\[TRC\] 127\.0\.0\.1:\d+ - cid:\d+ - .*->> \[PONG\]", timeout=3, after=mark)
        await c.close()
        await proc.await_log(r"\[DBG\] 127\.0\.0\.1:\d+ - cid:\d+ - .*Client connection closed", timeout=3, after=mark)
        # exactly one space between the arguments, as nats-server traces them
        await proc.await_log(r"\[TRC\] 127\.0\.0\.1:\d+ - cid:\d+ - .*<<- \[SUB foo 1\]", timeout=3, after=mark)


async def test_no_debug_or_trace_by_default():
    with start("-p", "-1", "-a", "127.0.0.1") as proc:
        c = await RawClient.open(proc.port)
        assert await c.ping() == b""
        await c.close()
        await asyncio.sleep(0.1)
        assert "[DBG]" not in proc.output and "[TRC]" not in proc.output


async def test_trace_redacts_password(conf):
    path = conf('listen: "127.0.0.1:-1"\nauthorization { user: alice, password: topsecret }\n')
    with start("-c", path, "-V") as proc:
        mark = proc.mark()
        c = await RawClient.open(proc.port, user="alice", **{"pass": "topsecret"})
        assert await c.ping() == b""
        await proc.await_log(r"<<- \[CONNECT ", timeout=3, after=mark)
        assert "topsecret" not in proc.output
        assert "[REDACTED]" in proc.output
        await c.close()


# ---------------------------------------------------------------------------------------------------
# Signals


async def test_sigterm_stops_cleanly():
    with start("-p", "-1", "-a", "127.0.0.1") as proc:
        nc = await nats.connect(f"nats://127.0.0.1:{proc.port}", allow_reconnect=False)
        proc.send_signal(signal.SIGTERM)
        assert await proc.await_exit() == 0
        assert re.search(r'\[INF\] Trapped "terminated" signal', proc.output)
        assert proc.output.rstrip().endswith("[INF] Server Exiting..")
        await nc.close()


@pytest.mark.parametrize("sig, name", [(signal.SIGTERM, "terminated"), (signal.SIGHUP, "hangup")])
async def test_signal_right_after_ready_is_trapped(sig, name):
    # nats-server traps signals before it logs "Server is ready"
    proc = ServerProcess("-p", "-1", "-a", "127.0.0.1")
    with proc:
        proc.wait_log(r"\[INF\] Server is ready", 15)
        proc.send_signal(sig)
        await proc.await_log(rf'\[INF\] Trapped "{name}" signal', timeout=5)
        if sig == signal.SIGTERM:
            assert await proc.await_exit() == 0
        else:
            assert proc.proc.poll() is None


async def test_sigint_stops_cleanly():
    with start("-p", "-1", "-a", "127.0.0.1") as proc:
        proc.send_signal(signal.SIGINT)
        assert await proc.await_exit() == 0
        assert re.search(r'\[INF\] Trapped "interrupt" signal', proc.output)


RELOAD_CONF = """listen: "127.0.0.1:-1"
authorization {{ users = [ {{ user: alice, password: {password} }} ] }}
debug: {debug}
"""


async def test_sighup_reloads_config(conf):
    path = conf(RELOAD_CONF.format(password="first", debug="false"))
    with start("-c", path) as proc:
        old = await RawClient.open(proc.port, user="alice", **{"pass": "first"})
        assert await old.ping() == b""
        with open(path, "w") as f:
            f.write(RELOAD_CONF.format(password="second", debug="true"))
        mark = proc.mark()
        proc.send_signal(signal.SIGHUP)
        await proc.await_log(r'\[INF\] Trapped "hangup" signal', timeout=3, after=mark)
        await proc.await_log(r"\[INF\] Reloaded server configuration", timeout=3, after=mark)

        bad = await RawClient.open(proc.port, user="alice", **{"pass": "first"})
        bad.send(b"PING\r\n")
        assert await bad.read_until_closed() == b"-ERR 'Authorization Violation'\r\n"
        good = await RawClient.open(proc.port, user="alice", **{"pass": "second"})
        assert await good.ping() == b""
        # debug is on now
        await proc.await_log(r"\[DBG\] .*Client connection created", timeout=3, after=mark)
        # the connection made with the old password does not survive the reload
        data = await old.read_until_closed(timeout=5)
        assert data == b"-ERR 'Authorization Violation'\r\n"
        await good.close()


async def test_sighup_with_broken_config_keeps_running(conf):
    path = conf('listen: "127.0.0.1:-1"\n')
    with start("-c", path) as proc:
        with open(path, "w") as f:
            f.write('listen: "127.0.0.1:-1"\nunknown_field_x: 1\n')
        mark = proc.mark()
        proc.send_signal(signal.SIGHUP)
        await proc.await_log(r"\[ERR\] .*unknown field", timeout=3, after=mark)
        c = await RawClient.open(proc.port)
        assert await c.ping() == b""
        await c.close()
        assert proc.proc.poll() is None


LDM_CONF = """listen: "127.0.0.1:-1"
lame_duck_duration: "30s"
lame_duck_grace_period: "0.5s"
"""


async def _check_lame_duck(proc: ServerProcess, trigger) -> None:
    c = await RawClient.open(proc.port, protocol=1)
    assert await c.ping() == b""
    t0 = time.monotonic()
    trigger()
    line = await c.readline(timeout=5)
    assert line.startswith(b"INFO ")
    info = json.loads(line[5:])
    assert info["ldm"] is True
    await proc.await_log(r"\[INF\] Entering lame duck mode, stop accepting new clients")
    # new clients are refused
    with pytest.raises(OSError):
        _, w = await asyncio.open_connection("127.0.0.1", proc.port)
        w.close()
    # after the grace period the client is closed, then the server exits
    assert await c.read_until_closed(timeout=10) == b""
    assert time.monotonic() - t0 >= 0.4
    assert await proc.await_exit(10) == 0
    assert "Server Exiting.." in proc.output


async def test_sigusr2_lame_duck(conf):
    with start("-c", conf(LDM_CONF)) as proc:
        await _check_lame_duck(proc, lambda: proc.send_signal(signal.SIGUSR2))
        assert re.search(r'\[INF\] Trapped "user defined signal 2" signal', proc.output)


async def test_signal_command_ldm_by_pid(conf):
    with start("-c", conf(LDM_CONF)) as proc:
        def trigger():
            r = run_command("--signal", f"ldm={proc.pid}", timeout=10)
            assert r.returncode == 0, r.stderr
        await _check_lame_duck(proc, trigger)


async def test_signal_command_reload_by_pid_file(conf, tmp_path):
    pid_file = tmp_path / "rl.pid"
    path = conf(RELOAD_CONF.format(password="first", debug="false"))
    with start("-c", path, "-P", str(pid_file)) as proc:
        with open(path, "w") as f:
            f.write(RELOAD_CONF.format(password="second", debug="false"))
        mark = proc.mark()
        r = run_command("--signal", f"reload={pid_file}", timeout=10)
        assert r.returncode == 0, r.stderr
        await proc.await_log(r"\[INF\] Reloaded server configuration", timeout=3, after=mark)
        c = await RawClient.open(proc.port, user="alice", **{"pass": "second"})
        assert await c.ping() == b""
        await c.close()


async def test_signal_command_stop_by_pid(conf):
    with start("-p", "-1", "-a", "127.0.0.1") as proc:
        r = run_command("--signal", f"quit={proc.pid}", timeout=10)
        assert r.returncode == 0, r.stderr
        assert await proc.await_exit() == 0


def test_signal_command_unknown_signal():
    r = run_command("--signal", "bogus=1", timeout=10)
    assert r.returncode != 0
    assert "bogus" in r.stderr


def test_signal_command_bad_pid_file(tmp_path):
    r = run_command("--signal", f"reload={tmp_path / 'missing.pid'}", timeout=10)
    assert r.returncode != 0
