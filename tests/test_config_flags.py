"""nats-server's command line (rillet.config.flags)."""
from __future__ import annotations

import pytest

from rillet.config import ConfigError
from rillet.config.flags import FlagError, parse_command_line, parse_flags, reload_options
from rillet.config.options import DEFAULT_PORT, Options


def opts_for(*argv: str) -> Options:
    return parse_command_line(list(argv)).options


@pytest.fixture
def conf(tmp_path):
    """Write a config file and return its path."""
    def write(text: str, name: str = "n.conf") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)
    return write


# -- syntax of flags ----------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["-p", "4333"], ["-p=4333"], ["--p", "4333"], ["--p=4333"], ["-port", "4333"],
    ["--port", "4333"], ["--port=4333"], ["-port=4333"]])
def test_flag_spellings(argv):
    assert opts_for(*argv).port == 4333


def test_random_port_is_kept():
    assert opts_for("-p", "-1").port == -1
    assert opts_for("-p=-1").port == -1


def test_port_zero_means_default():
    assert opts_for("-p", "0").port == DEFAULT_PORT


def test_go_integer_forms():
    assert opts_for("-p", "0x10").port == 16
    assert opts_for("-p", "010").port == 8  # Go reads a leading 0 as octal
    assert opts_for("-p", "+12").port == 12


@pytest.mark.parametrize("argv,path,value", [
    (["-a", "127.0.0.1"], "host", "127.0.0.1"),
    (["--addr", "127.0.0.2"], "host", "127.0.0.2"),
    (["--net=127.0.0.3"], "host", "127.0.0.3"),
    (["-n", "s1"], "server_name", "s1"),
    (["--name", "s2"], "server_name", "s2"),
    (["--server_name=s3"], "server_name", "s3"),
    (["-P", "/tmp/p.pid"], "pid_file", "/tmp/p.pid"),
    (["--pid", "/tmp/q.pid"], "pid_file", "/tmp/q.pid"),
    (["-m", "8222"], "http_port", 8222),
    (["--http_port=8223"], "http_port", 8223),
    (["-ms", "8443"], "https_port", 8443),
    (["--https_port", "8444"], "https_port", 8444),
    (["-l", "/tmp/n.log"], "log_file", "/tmp/n.log"),
    (["--log=/tmp/m.log"], "log_file", "/tmp/m.log"),
    (["--log_size_limit", "1000"], "log_size_limit", 1000),
    (["-T=false"], "logtime", False),
    (["--logtime=false"], "logtime", False),
    (["-T"], "logtime", True),
    (["--logtime_utc"], "logtime_utc", True),
    (["-D"], "debug", True),
    (["--debug"], "debug", True),
    (["-V"], "trace", True),
    (["--trace"], "trace", True),
    (["-s"], "syslog", True),
    (["-r", "udp://h:514"], "remote_syslog", "udp://h:514"),
    (["--user", "foo"], "username", "foo"),
    (["--pass", "bar"], "password", "bar"),
    (["--auth", "tok"], "authorization", "tok"),
    (["--ports_file_dir", "/tmp"], "ports_file_dir", "/tmp"),
    (["-js"], "jetstream.enabled", True),
    (["--jetstream"], "jetstream.enabled", True),
    (["-sd=/tmp/x"], "jetstream.store_dir", "/tmp/x"),
    (["--store_dir", "/tmp/y"], "jetstream.store_dir", "/tmp/y"),
    (["--client_advertise", "h:4222"], "client_advertise", "h:4222"),
    (["--cluster_name", "c1"], "cluster.name", "c1"),
    (["--no_advertise"], "cluster.no_advertise", True),
    (["--cluster_advertise", "x:1"], "cluster.advertise", "x:1"),
    (["--connect_retries", "3"], "cluster.connect_retries", 3),
])
def test_each_flag(argv, path, value):
    opts = opts_for(*argv)
    target = opts
    for part in path.split("."):
        target = getattr(target, part)
    assert target == value
    assert path in opts.flags_set


@pytest.mark.parametrize("flag,debug,trace,verbose", [
    ("-DV", True, True, False), ("-VV", False, True, True), ("-DVV", True, True, True),
    ("-DV=false", False, False, False)])
def test_combined_logging_flags(flag, debug, trace, verbose):
    opts = opts_for(flag)
    assert (opts.debug, opts.trace, opts.trace_verbose) == (debug, trace, verbose)


def test_harness_style_command_line():
    opts = opts_for("-a", "127.0.0.1", "-p", "4222", "-sd=/tmp/x", "-js", "--user", "foo",
                    "--pass", "bar", "-m", "8222", "-n", "srv")
    assert (opts.host, opts.port, opts.username, opts.password) == ("127.0.0.1", 4222, "foo", "bar")
    assert opts.jetstream.enabled and opts.jetstream.store_dir == "/tmp/x"
    assert opts.http_port == 8222 and opts.server_name == "srv"
    assert opts.flags_set == {"host", "port", "jetstream.store_dir", "jetstream.enabled",
                              "username", "password", "http_port", "server_name"}


def test_double_dash_ends_flags_and_positional_commands():
    assert parse_command_line(["-p", "1", "--", "version"]).show_version
    assert parse_command_line(["version"]).show_version
    assert parse_command_line(["help"]).show_help
    assert parse_command_line(["-p", "1", "help"]).show_help


@pytest.mark.parametrize("argv,message", [
    (["-x"], "flag provided but not defined: -x"),
    (["--nope=1"], "flag provided but not defined: -nope"),
    (["-p"], "flag needs an argument: -p"),
    (["-p", "abc"], 'invalid value "abc" for flag -p: parse error'),
    (["-D=maybe"], 'invalid boolean value "maybe" for -D: parse error'),
    (["---p"], "bad flag syntax: ---p"),
    (["-=x"], "bad flag syntax: -=x"),
    (["-T", "false"], 'unrecognized command: "false"'),
    (["extra"], 'unrecognized command: "extra"'),
    (["-t"], "must specify [-c, --config] option to check configuration file syntax"),
    (["--routes", "nats://a:1"], "solicited routes require cluster capabilities, e.g. --cluster"),
    (["--tls"], "TLS Server certificate must be present and valid"),
    (["--tlscert", "c"], "TLS Server private key must be present and valid"),
    (["--signal", "bogus"], 'unknown signal "bogus"'),
    (["--signal", "stop=1=2"], "invalid signal parameters: [2]"),
    (["--cluster", "nats://u@h:6222"], "expected cluster password to be set"),
])
def test_flag_errors(argv, message):
    with pytest.raises(FlagError) as info:
        parse_command_line(argv)
    assert str(info.value) == message


def test_parse_flags_keeps_last_value():
    values, rest = parse_flags(["-p", "1", "--port", "2", "x", "-D"])
    assert values == {"port": 2} and rest == ["x", "-D"]


# -- help, version, signals -------------------------------------------------------------


@pytest.mark.parametrize("flag", ["-h", "--help", "-help"])
def test_help(flag):
    cmd = parse_command_line([flag, "-p", "1"])
    assert cmd.show_help and "Usage:" in cmd.help_text
    for word in ("--port", "--config", "--store_dir", "--signal", "--tlscert", "--routes"):
        assert word in cmd.help_text


@pytest.mark.parametrize("flag", ["-v", "--version", "-version"])
def test_version(flag):
    assert parse_command_line([flag]).show_version


def test_help_tls():
    cmd = parse_command_line(["--help_tls"])
    assert cmd.show_tls_help and "cert_file" in cmd.tls_help_text


@pytest.mark.parametrize("signal", ["ldm", "quit", "stop", "reload", "reopen", "term"])
def test_signals(signal):
    cmd = parse_command_line(["--signal", signal])
    assert (cmd.signal, cmd.signal_pid) == (signal, None)
    cmd = parse_command_line([f"-sl={signal}=1234"])
    assert (cmd.signal, cmd.signal_pid) == (signal, "1234")


def test_signal_pid_from_pid_file(tmp_path):
    pid_file = tmp_path / "n.pid"
    pid_file.write_text("4321\n")
    cmd = parse_command_line(["--signal", f"reload={pid_file}"])
    assert (cmd.signal, cmd.signal_pid) == ("reload", "4321")


# -- config file and precedence ---------------------------------------------------------------


def test_config_file_is_loaded(conf):
    path = conf("port: 4555\nserver_name: from_file\ndebug: true\n")
    cmd = parse_command_line(["-c", path])
    assert cmd.config_file == path and cmd.options.config_file == path
    assert (cmd.options.port, cmd.options.server_name, cmd.options.debug) == (4555, "from_file", True)
    assert cmd.options.flags_set == set()


def test_flags_override_the_file(conf):
    path = conf("port: 4555\nserver_name: from_file\ndebug: true\nlogtime: true\n"
                "authorization { user: fu, password: fp }\njetstream { store_dir: /file }\n")
    opts = opts_for("--config", path, "-p", "4666", "-D=false", "-T=false", "--user", "cli",
                    "-sd", "/cli")
    assert opts.port == 4666 and opts.server_name == "from_file"
    assert opts.debug is False and opts.logtime is False
    assert (opts.username, opts.password) == ("cli", "fp")
    assert opts.jetstream.enabled and opts.jetstream.store_dir == "/cli"
    assert {"port", "debug", "logtime", "username", "jetstream.store_dir"} <= opts.flags_set


def test_flag_order_does_not_matter_for_config(conf):
    path = conf("port: 4555\n")
    assert opts_for("-p", "1", "-c", path).port == 1
    assert opts_for("-c", path, "-p", "1").port == 1


def test_cluster_flag_overrides_file(conf):
    path = conf("cluster { listen: 127.0.0.1:6222, name: c, "
                "authorization { user: ru, password: rp } }\n")
    opts = opts_for("-c", path, "--cluster", "nats://0.0.0.0:7222")
    cl = opts.cluster
    assert (cl.host, cl.port, cl.listen, cl.name) == ("0.0.0.0", 7222, "nats://0.0.0.0:7222", "c")
    assert (cl.username, cl.password) == ("", "")
    opts = opts_for("-c", path, "--cluster_listen=nats://a:b@127.0.0.1:-1", "--routes",
                    "nats://x:1, nats://y:2")
    cl = opts.cluster
    assert (cl.host, cl.port, cl.username, cl.password) == ("127.0.0.1", -1, "a", "b")
    assert cl.routes == ["nats://x:1", "nats://y:2"]


def test_empty_cluster_flag_disables_clustering(conf):
    path = conf("cluster { listen: 127.0.0.1:6222 }\n")
    assert opts_for("-c", path, "--cluster=").cluster.port == 0


def test_routes_with_cluster_from_file(conf):
    path = conf("cluster { port: 6222, routes: [nats://old:1] }\n")
    assert opts_for("-c", path, "--routes", "nats://new:1").cluster.routes == ["nats://new:1"]
    assert opts_for("-c", path, "--routes=").cluster.routes == []


def test_tls_flags(conf):
    opts = opts_for("--tls", "--tlscert", "c.pem", "--tlskey", "k.pem")
    assert (opts.tls.cert_file, opts.tls.key_file, opts.tls.verify) == ("c.pem", "k.pem", False)
    assert opts.tls_required and "tls" in opts.flags_set
    opts = opts_for("--tlsverify", "--tlscert", "c.pem", "--tlskey", "k.pem", "--tlscacert", "ca")
    assert opts.tls.verify and opts.tls.ca_file == "ca"
    path = conf("tls { cert_file: f.pem, key_file: fk.pem, timeout: 5 }\n")
    assert opts_for("-c", path).tls.cert_file == "f.pem"
    assert opts_for("-c", path, "--tls=false").tls is None
    assert opts_for("-c", path, "--tls=false", "--tlscert", "x").tls is None
    replaced = opts_for("-c", path, "--tlscert", "c2", "--tlskey", "k2").tls
    assert (replaced.cert_file, replaced.timeout) == ("c2", 2.0)


def test_test_config_mode(conf):
    path = conf("port: 4555\n")
    cmd = parse_command_line(["-t", "-c", path])
    assert cmd.test_config and cmd.options.port == 4555


def test_test_config_mode_fails_on_warnings(conf):
    path = conf("ping_interval: 30\n")
    assert opts_for("-c", path).ping_interval == 30.0  # a warning when starting
    with pytest.raises(ConfigError) as info:
        parse_command_line(["-t", "-c", path])
    assert "should be converted to a duration" in info.value.reason


def test_bad_config_file_raises_config_error(conf):
    path = conf("port: 1\nbogus: 2\n")
    with pytest.raises(ConfigError) as info:
        parse_command_line(["-c", path])
    assert (info.value.file, info.value.line, info.value.column) == (path, 2, 1)
    with pytest.raises(ConfigError):
        parse_command_line(["-c", path + ".missing"])


# -- reload -----------------------------------------------------------------------------------


def test_reload_rereads_the_file_and_keeps_flags(conf):
    path = conf("port: 4555\nserver_name: one\ndebug: false\n")
    argv = ["-c", path, "-D", "-p", "4666"]
    cmd = parse_command_line(argv)
    assert (cmd.options.server_name, cmd.options.debug, cmd.options.port) == ("one", True, 4666)
    conf("port: 4777\nserver_name: two\ndebug: false\nmax_payload: 2MB\n")
    for reloaded in (reload_options(argv), cmd.reload()):
        assert reloaded.server_name == "two" and reloaded.max_payload == 2 * 1024 * 1024
        assert reloaded.debug is True and reloaded.port == 4666
        assert {"debug", "port"} == reloaded.flags_set
    assert cmd.options.server_name == "one"  # the original is untouched


def test_reload_reports_a_broken_file(conf):
    path = conf("port: 4555\n")
    argv = ["-c", path]
    parse_command_line(argv)
    conf("port: [\n")
    with pytest.raises(ConfigError):
        reload_options(argv)
