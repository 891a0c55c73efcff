"""Logging to syslog: ``-s/--syslog``, ``-r/--remote_syslog`` and the ``syslog`` / ``remote_syslog`` keys.

The remote form is checked end to end: the server (Rillet, or nats-server with RILLET_TEST_TARGET=nats-server)
sends its log to a UDP socket of the test, in Go's log/syslog layout ``<pri>RFC3339 host tag[pid]: msg``.
"""
from __future__ import annotations

import os
import re
import socket
import time

import pytest

from helpers import ServerProcess, run_command
from rillet.server.logging import Logger, SyslogError

REMOTE_LINE = re.compile(r"^<(\d+)>(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:Z|[+-]\d\d:\d\d)) (\S+) (\S+)\[(\d+)\]: (.*)\n$")
LOCAL_LINE = re.compile(r"^<(\d+)>([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) (\S+)\[(\d+)\]: (.*)\n$")


@pytest.fixture
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(5)
    yield s
    s.close()


def receive_until(sock: socket.socket, text: str, limit: float = 10.0) -> list[str]:
    """Datagrams (decoded) up to and including the first one containing ``text``."""
    got: list[str] = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536).decode()
        except socket.timeout:
            break
        got.append(data)
        if text in data:
            return got
    raise AssertionError(f"no syslog line with {text!r}; got {got}")


def test_remote_syslog_flag_sends_the_log_over_udp(udp):
    port = udp.getsockname()[1]
    with ServerProcess("-a", "127.0.0.1", "-p", "-1", "-r", f"udp://127.0.0.1:{port}") as srv:
        lines = receive_until(udp, "Server is ready")
        assert srv.proc.poll() is None
        stderr = srv.output
    first = REMOTE_LINE.match(lines[0])
    assert first, lines[0]
    assert first.group(1) == "5"  # facility 0, severity notice: the INF level
    assert first.group(5) == str(srv.pid)
    assert first.group(6) == "Starting nats-server"
    assert all(REMOTE_LINE.match(line) for line in lines), lines
    assert any("Listening for client connections on 127.0.0.1:" in line for line in lines)
    assert "[INF]" not in "".join(lines)  # the level is the syslog severity, not a label
    assert "Server is ready" not in stderr  # the log went to syslog, not to stderr


def test_remote_syslog_key_in_the_config_file(udp, tmp_path):
    port = udp.getsockname()[1]
    conf = tmp_path / "s.conf"
    conf.write_text(f'listen: "127.0.0.1:-1"\nremote_syslog: "udp://127.0.0.1:{port}"\n')
    with ServerProcess("-c", str(conf)):
        lines = receive_until(udp, "Server is ready")
    assert REMOTE_LINE.match(lines[-1]).group(6) == "Server is ready"


def test_log_file_wins_over_remote_syslog(udp, tmp_path):
    port = udp.getsockname()[1]
    log = tmp_path / "server.log"
    with ServerProcess("-a", "127.0.0.1", "-p", "-1", "-l", str(log), "-r", f"udp://127.0.0.1:{port}"):
        deadline = time.monotonic() + 10
        while "Server is ready" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline, "the log file never said the server is ready"
            time.sleep(0.05)
    udp.settimeout(0.2)
    with pytest.raises(socket.timeout):
        udp.recv(65536)


def test_severities_follow_nats_server(udp):
    """INF and TRC notice (5), WRN warning (4), ERR error (3), FTL critical (2), DBG debug (7);
    facility 0 for a remote syslog."""
    port = udp.getsockname()[1]
    log = Logger(debug=True, trace=True, remote_syslog=f"udp://127.0.0.1:{port}")
    try:
        log.notice("n")
        log.warn("w")
        log.error("e")
        log.fatal("f")
        log.debug("d")
        log.trace("t")
        got = [REMOTE_LINE.match(udp.recv(65536).decode()) for _ in range(6)]
    finally:
        log.close()
    assert [(m.group(1), m.group(6)) for m in got] == [
        ("5", "n"), ("4", "w"), ("3", "e"), ("2", "f"), ("7", "d"), ("5", "t")]


def test_debug_and_trace_stay_off_unless_asked(udp):
    port = udp.getsockname()[1]
    log = Logger(remote_syslog=f"udp://127.0.0.1:{port}")
    try:
        log.debug("d")
        log.trace("t")
        log.notice("n")
        assert REMOTE_LINE.match(udp.recv(65536).decode()).group(6) == "n"
    finally:
        log.close()


def test_remote_syslog_over_tcp():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(5)
        port = listener.getsockname()[1]
        log = Logger(remote_syslog=f"tcp://127.0.0.1:{port}")
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(5)
                log.warn("over tcp")
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(4096)
        finally:
            log.close()
    m = REMOTE_LINE.match(data.decode())
    assert m and m.group(1) == "4" and m.group(6) == "over tcp"


def test_local_syslog_uses_the_daemon_facility(tmp_path):
    path = str(tmp_path / "log.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as daemon:
        daemon.bind(path)
        daemon.settimeout(5)
        log = Logger(syslog=True, syslog_paths=(str(tmp_path / "missing"), path))
        try:
            log.notice("hello")
            log.error("bad")
            first, second = (LOCAL_LINE.match(daemon.recv(65536).decode()) for _ in range(2))
        finally:
            log.close()
    assert (first.group(1), first.group(5)) == ("29", "hello")  # daemon (3) * 8 + notice (5)
    assert (second.group(1), second.group(5)) == ("27", "bad")
    assert first.group(4) == str(os.getpid())


@pytest.mark.parametrize("url,message", [
    ("udp://localhost", 'error connecting to syslog: "dial udp: address localhost: missing port in address"'),
    ("http://x:1", 'error invalid network type: "http"'),
    ("localhost:514", 'error invalid network type: "localhost"'),
])
def test_bad_remote_syslog_urls(url, message):
    with pytest.raises(SyslogError) as e:
        Logger(remote_syslog=url)
    assert str(e.value) == message


def test_syslog_without_a_daemon_stops_the_server_like_nats_server(tmp_path):
    with pytest.raises(SyslogError, match='error connecting to syslog: "Unix syslog delivery error"'):
        Logger(syslog=True, syslog_paths=(str(tmp_path / "none"),))


def test_unreachable_remote_syslog_stops_the_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        r = run_command("-p", "-1", "-r", f"tcp://127.0.0.1:{port}")
    assert r.returncode == 1
    assert re.search(rf'^\d{{4}}/\d\d/\d\d \d\d:\d\d:\d\d error connecting to syslog: "dial tcp 127.0.0.1:{port}: '
                     r'connect: connection refused"$', r.stderr.strip()), r.stderr


# ---- the log file: rotation (log_size_limit) and the number of files kept (logfile_max_num) ---------------

def test_log_file_rotates_at_the_size_limit_and_keeps_max_files(tmp_path):
    path = tmp_path / "s.log"
    log = Logger(log_file=str(path), size_limit=200, max_files=3)
    try:
        for i in range(40):
            log.notice(f"line {i:02d} " + "x" * 40)
    finally:
        log.close()
    backups = sorted(p.name for p in tmp_path.iterdir() if p.name != "s.log")
    assert len(backups) == 2  # max_files counts the live file: 3 - 1 backups remain
    assert all(re.fullmatch(r"s\.log\.\d{4}(\.\d\d){5}\.\d{9}", b) for b in backups), backups
    live = path.read_text()
    assert "Rotated log, backup saved as" in live
    assert 'Purged log file "s.log.' in live
    kept = live + "".join((tmp_path / b).read_text() for b in backups)
    assert "line 39" in kept and "line 00" not in kept  # the oldest went, the newest stayed


def test_without_max_files_every_backup_stays(tmp_path):
    path = tmp_path / "s.log"
    log = Logger(log_file=str(path), size_limit=200)
    try:
        for i in range(40):
            log.notice(f"line {i:02d} " + "x" * 40)
    finally:
        log.close()
    assert len([p for p in tmp_path.iterdir() if p.name != "s.log"]) > 5


def test_logfile_max_num_key_reaches_the_logger(tmp_path):
    from rillet.config.options_builder import load_string
    o = load_string(f'log_file: "{tmp_path}/a.log"\nlogfile_size_limit: 200\nlogfile_max_num: 2\n')
    assert o.log_max_files == 2
    log = Logger.from_options(o)
    try:
        for i in range(30):
            log.notice("y" * 60)
    finally:
        log.close()
    assert len([p for p in tmp_path.iterdir() if p.name != "a.log"]) == 1
    assert load_string("log_max_num: 4").log_max_files == 4
