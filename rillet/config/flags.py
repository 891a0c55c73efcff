"""nats-server's command line: parse the flags, load the ``-c`` config file, apply flags on top.

Flag syntax follows Go's ``flag`` package, which nats-server uses: ``-name``, ``--name``,
``-name=value``, ``--name=value`` and ``-name value`` (a non-boolean flag always takes the
next argument, so ``-p -1`` works). Boolean flags take no separate argument; use
``-T=false`` to turn one off. Parsing stops at the first non-flag argument or at ``--``;
the only words accepted after the flags are ``version`` and ``help``.

Flags win over the config file, on start and on every reload: ``reload_options(argv)``
re-reads the file and re-applies the same flags. The Options fields a flag set are listed
in ``Options.flags_set``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rillet.config.options import DEFAULT_PORT, Options, TLSConfig
from rillet.gocompat.goquote import go_bool

from .builder_base import split_host_port

__all__ = ["CommandLine", "FlagError", "parse_command_line", "reload_options", "USAGE", "TLS_HELP"]

SIGNALS = ("ldm", "stop", "quit", "term", "reopen", "reload")

USAGE = """
Usage: rillet-server [options]

Server Options:
    -a, --addr, --net <host>         Address to bind the client listener to (default: 0.0.0.0)
    -p, --port <port>                Client port; -1 picks a free one (default: 4222)
    -n, --name
        --server_name <server_name>  Name of this server (default: generated)
    -P, --pid <file>                 Write the process id to this file
    -m, --http_port <port>           Port for HTTP monitoring
    -ms,--https_port <port>          Port for HTTPS monitoring
        --http_metrics               Serve /metrics (Prometheus) on the monitoring port
    -c, --config <file>              Read this configuration file
    -t                               Check the configuration file and exit
    -sl,--signal <signal>[=<pid>]    Signal a running server (ldm, stop, quit, term, reopen, reload)
                                     <pid> is a process id or the path of a PID file
        --client_advertise <string>  Client URL advertised to other servers
        --ports_file_dir <dir>       Write a ports file (<executable_name>_<pid>.ports) in this directory

Logging Options:
    -l, --log <file>                 Log to this file
    -T, --logtime                    Put timestamps on log lines (default: true; -T=false to disable)
    -s, --syslog                     Log to syslog
    -r, --remote_syslog <addr>       Remote syslog address (udp://localhost:514)
    -D, --debug                      Debug output
    -V, --trace                      Protocol trace output
    -VV                              Verbose trace (the system account too)
    -DV                              Debug and trace
    -DVV                             Debug and verbose trace
        --log_size_limit <limit>     Rotate the log file at this size (bytes)

JetStream Options:
    -js, --jetstream                 Enable JetStream
    -sd, --store_dir <dir>           JetStream storage directory

Authorization Options:
        --user <user>                Username clients must present
        --pass <password>            Password clients must present
        --auth <token>               Token clients must present

TLS Options:
        --tls                        Enable TLS without verifying clients (default: false)
        --tlscert <file>             Server certificate
        --tlskey <file>              Server certificate's private key
        --tlsverify                  Enable TLS and verify client certificates
        --tlscacert <file>           CA used to verify client certificates

Cluster Options:
        --routes <rurl-1, rurl-2>    Routes to connect to
        --cluster <cluster-url>      URL to listen on for routes
        --cluster_name <string>      Cluster name (default: generated)
        --no_advertise <bool>        Do not tell clients about other cluster members
        --cluster_advertise <string> Cluster URL advertised to other servers
        --connect_retries <number>   Connect attempts for implicit routes
        --cluster_listen <url>       Same as --cluster

Common Options:
    -h, --help                       Show this help
    -v, --version                    Show the version
        --help_tls                   Help on TLS settings
"""

TLS_HELP = """
TLS settings live in a tls { } block of the configuration file:

    tls {
      cert_file: "server-cert.pem"     # certificate presented to clients
      key_file:  "server-key.pem"      # its private key
      ca_file:   "ca.pem"              # CA used to check client certificates
      verify:    true                  # require and verify client certificates
      timeout:   2                     # seconds (or a duration string) for the handshake
      handshake_first: false           # TLS before the INFO line (true, "auto" or a delay)
      cipher_suites: [...]             # Go names of the allowed suites (TLS 1.2; TLS 1.3 suites are fixed)
      curve_preferences: [...]         # one Go curve name (X25519, CurveP256, CurveP384, CurveP521)
      min_version: "1.2"               # "1.2" or "1.3"
      pinned_certs: [...]              # hex SHA-256 of the client certificates' SubjectPublicKeyInfo
      connection_rate_limit: 0         # TLS connections accepted per second (0: no limit)
      ocsp_peer: true                  # check client certificates with their CA's OCSP responder
    }
    (cert_store, cert_match*, certs are not supported and refused at load; OCSP stapling is refused.)
"""


class FlagError(ValueError):
    """A bad command line; the message reads like nats-server's."""


class FlagSyntaxError(FlagError):
    """What Go's flag package rejects (unknown flag, bad value): nats-server prints it with the usage
    and exits with status 0. Every other FlagError stops it with "nats-server: <error>" and status 1."""


class UnsupportedFlag(FlagError):
    """A flag nats-server knows that Rillet refuses (the server does not start, exit status 1)."""


# Flags refused when given a value other than their default (parsed-values key -> why).
UNSUPPORTED_FLAGS = {
    "profile": "--profile is not supported: Rillet has no profiling port",
}


@dataclass
class CommandLine:
    options: Options
    argv: list[str] = field(default_factory=list)
    show_version: bool = False
    show_help: bool = False
    show_tls_help: bool = False
    test_config: bool = False
    signal: str | None = None
    signal_pid: str | None = None
    config_file: str = ""
    help_text: str = USAGE
    tls_help_text: str = TLS_HELP

    def reload(self) -> Options:
        """Re-read the config file and re-apply the same flags (for SIGHUP)."""
        return reload_options(self.argv)


# ---------------------------------------------------------------------------
# Flag table

@dataclass(frozen=True)
class _Flag:
    dest: str          # key in the parsed-values dict
    kind: str          # "bool", "int" or "str"


def _table() -> dict[str, _Flag]:
    # (flag names, kind[, key]): the value's key in the parsed values is the last name unless given
    spec: list[tuple[Any, ...]] = [
        (("h", "help"), "bool"),
        (("p", "port"), "int"),
        (("n", "name", "server_name"), "str"),
        (("a", "addr", "net"), "str", "host"),
        (("client_advertise",), "str"),
        (("D", "debug"), "bool"),
        (("V", "trace"), "bool"),
        (("VV",), "bool"),
        (("DV",), "bool"),
        (("DVV",), "bool"),
        (("T", "logtime"), "bool"),
        (("logtime_utc",), "bool"),
        (("user",), "str", "username"),
        (("pass",), "str", "password"),
        (("auth",), "str", "authorization"),
        (("m", "http_port"), "int"),
        (("ms", "https_port"), "int"),
        (("http_metrics",), "bool"),
        (("c", "config"), "str"),
        (("t",), "bool", "test_config"),
        (("sl", "signal"), "str"),
        (("P", "pid"), "str", "pid_file"),
        (("ports_file_dir",), "str"),
        (("l", "log"), "str", "log_file"),
        (("log_size_limit",), "int"),
        (("s", "syslog"), "bool"),
        (("r", "remote_syslog"), "str"),
        (("v", "version"), "bool"),
        (("profile",), "int"),
        (("routes",), "str"),
        (("cluster", "cluster_listen"), "str", "cluster"),
        (("cluster_advertise",), "str"),
        (("no_advertise",), "bool"),
        (("connect_retries",), "int"),
        (("cluster_name",), "str"),
        (("help_tls",), "bool"),
        (("tls",), "bool"),
        (("tlsverify",), "bool"),
        (("tlscert",), "str"),
        (("tlskey",), "str"),
        (("tlscacert",), "str"),
        (("max_traced_msg_len",), "int"),
        (("js", "jetstream"), "bool"),
        (("sd", "store_dir"), "str"),
    ]
    table = {}
    for names, kind, *key in spec:
        dest = key[0] if key else names[-1]
        for name in names:
            table[name] = _Flag(dest, kind)
    return table


FLAGS = _table()

def _parse_bool(name: str, text: str) -> bool:
    b = go_bool(text)
    if b is not None:
        return b
    raise FlagSyntaxError(f'invalid boolean value "{text}" for -{name}: parse error')


def _parse_int(name: str, text: str) -> int:
    """Go's strconv.ParseInt(text, 0, 64): decimal, 0x.., 0o.., 0b.., or 0-prefixed octal."""
    sign, body = ("", text) if text[:1] not in ("+", "-") else (text[0], text[1:])
    if len(body) > 1 and body[0] == "0" and (body[1].isdigit() or body[1] == "_"):
        body = "0o" + body[1:]
    try:
        value = int(sign + body, 0)
    except ValueError:
        raise FlagSyntaxError(f'invalid value "{text}" for flag -{name}: parse error') from None
    if not -(1 << 63) <= value < (1 << 63):
        raise FlagSyntaxError(f'invalid value "{text}" for flag -{name}: value out of range')
    return value


def parse_flags(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Go ``flag`` semantics: returns ({dest: value} in the order given, remaining args)."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if len(arg) < 2 or arg[0] != "-":
            break
        dashes = 2 if arg[1] == "-" else 1
        if dashes == 2 and len(arg) == 2:  # "--" ends the flags
            i += 1
            break
        body = arg[dashes:]
        if not body or body[0] in "-=":
            raise FlagSyntaxError(f"bad flag syntax: {arg}")
        name, has_value, value = body.partition("=")
        flag = FLAGS.get(name)
        if flag is None:
            raise FlagSyntaxError(f"flag provided but not defined: -{name}")
        i += 1
        if flag.kind == "bool":
            values.pop(flag.dest, None)  # keep "last given" order
            values[flag.dest] = _parse_bool(name, value) if has_value else True
            continue
        if not has_value:
            if i >= len(argv):
                raise FlagSyntaxError(f"flag needs an argument: -{name}")
            value = argv[i]
            i += 1
        values.pop(flag.dest, None)
        values[flag.dest] = _parse_int(name, value) if flag.kind == "int" else value
    return values, argv[i:]


# ---------------------------------------------------------------------------
# Command line -> Options

def parse_command_line(argv: list[str]) -> CommandLine:
    """Parse ``argv`` (without the program name), load ``-c`` if given, apply the flags.

    Raises ``FlagError`` for a bad command line and ``ConfigError`` for a bad config file.
    """
    values, rest = parse_flags(argv)
    cmd = CommandLine(options=Options(), argv=list(argv))
    cmd.show_version = bool(values.get("version"))
    cmd.show_help = bool(values.get("help"))
    cmd.show_tls_help = bool(values.get("help_tls"))
    if cmd.show_version or cmd.show_help or cmd.show_tls_help:
        return cmd
    if rest:
        word = rest[0].lower()
        if word == "version":
            cmd.show_version = True
            return cmd
        if word == "help":
            cmd.show_help = True
            return cmd
        raise FlagError(f'unrecognized command: "{rest[0]}"')

    cmd.test_config = bool(values.get("test_config"))
    if values.get("signal"):
        cmd.signal, cmd.signal_pid = _parse_signal(values["signal"])
        return cmd

    cmd.config_file = values.get("config", "")
    if cmd.config_file:
        from .options_builder import load_file  # (a configuration file: its parser and builders load here)
        cmd.options = load_file(cmd.config_file, warnings_as_errors=cmd.test_config)
    elif cmd.test_config:
        raise FlagError("must specify [-c, --config] option to check configuration file syntax")
    apply_flags(cmd.options, values)
    return cmd


def reload_options(argv: list[str]) -> Options:
    """Options as a fresh start with ``argv`` would build them (config file re-read)."""
    return parse_command_line(argv).options


def _parse_signal(text: str) -> tuple[str, str | None]:
    parts = text.split("=")
    if len(parts) > 2:
        raise FlagError(f"invalid signal parameters: [{' '.join(parts[2:])}]")
    command = parts[0]
    if command not in SIGNALS:
        raise FlagError(f'unknown signal "{command}"')
    pid = None
    if len(parts) == 2:
        pid = parts[1]
        try:  # a PID file path, or the PID itself
            with open(pid, encoding="utf-8") as f:
                pid = f.read().strip()
        except OSError:
            pass
    return command, pid


# Simple flags: parsed-values key -> (Options attribute path, fields_set name).
_DIRECT = {
    "port": "port",
    "max_traced_msg_len": "max_traced_msg_len",
    "host": "host",
    "server_name": "server_name",
    "client_advertise": "client_advertise",
    "debug": "debug",
    "trace": "trace",
    "logtime": "logtime",
    "logtime_utc": "logtime_utc",
    "username": "username",
    "password": "password",
    "authorization": "authorization",
    "http_port": "http_port",
    "https_port": "https_port",
    "http_metrics": "http_metrics",
    "pid_file": "pid_file",
    "ports_file_dir": "ports_file_dir",
    "log_file": "log_file",
    "log_size_limit": "log_size_limit",
    "syslog": "syslog",
    "remote_syslog": "remote_syslog",
    "cluster_advertise": "cluster.advertise",
    "no_advertise": "cluster.no_advertise",
    "connect_retries": "cluster.connect_retries",
    "cluster_name": "cluster.name",
    "jetstream": "jetstream.enabled",
    "store_dir": "jetstream.store_dir",
}


def _set(opts: Options, path: str, value: Any) -> None:
    target: Any = opts
    *parents, attr = path.split(".")
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, attr, value)
    opts.flags_set.add(path)


def apply_flags(opts: Options, values: dict[str, Any]) -> None:
    """Put the command-line ``values`` on top of ``opts`` (which holds the file's settings)."""
    specials: dict[str, Callable[[Options, Any], None]] = {
        "VV": lambda o, v: (_set(o, "trace", v), _set(o, "trace_verbose", v)),
        "DV": lambda o, v: (_set(o, "debug", v), _set(o, "trace", v)),
        "DVV": lambda o, v: (_set(o, "debug", v), _set(o, "trace", v),
                             _set(o, "trace_verbose", v)),
        "cluster": _apply_cluster_listen,
        "routes": _apply_routes,
    }
    for key, value in values.items():
        if key in UNSUPPORTED_FLAGS and value:
            raise UnsupportedFlag(UNSUPPORTED_FLAGS[key])
        if key == "port" and value == 0:
            value = DEFAULT_PORT  # as nats-server: 0 means the default, -1 a random port
        if key in _DIRECT:
            _set(opts, _DIRECT[key], value)
        elif key in specials:
            specials[key](opts, value)
    _apply_tls(opts, values)
    cl = opts.cluster
    if "routes" in values and values["routes"] and not (cl.listen or cl.host or cl.port):
        raise FlagError("solicited routes require cluster capabilities, e.g. --cluster")


def _apply_routes(opts: Options, text: str) -> None:
    routes = [r.strip() for r in text.split(",")] if text else []
    _set(opts, "cluster.routes", routes)


def _apply_cluster_listen(opts: Options, url: str) -> None:
    """``--cluster nats://[user:pass@]host:port``; an empty value turns clustering off."""
    cl = opts.cluster
    _set(opts, "cluster.listen", url)
    opts.flags_set.update({"cluster.host", "cluster.port"})
    if not url:
        cl.port = 0
        return
    from urllib.parse import unquote, urlsplit  # (with ipaddress, ~0.4 MB: a server without --cluster has no use)
    parts = urlsplit(url)
    host, port = split_host_port(parts.netloc.rpartition("@")[2])
    if port is None:
        raise FlagError(f"address {parts.netloc.rpartition('@')[2]}: missing port in address")
    try:
        cl.port = int(port)
    except ValueError:
        raise FlagError(f'invalid cluster port "{port}"') from None
    cl.host = host
    if "@" in parts.netloc:
        userinfo = parts.netloc.rpartition("@")[0]
        user, has_pass, password = userinfo.partition(":")
        if not has_pass:
            raise FlagError("expected cluster password to be set")
        cl.username, cl.password = unquote(user), unquote(password)
    else:
        cl.username = cl.password = ""  # the flag replaces credentials from the file
    opts.flags_set.update({"cluster.username", "cluster.password"})


def _apply_tls(opts: Options, values: dict[str, Any]) -> None:
    """``--tls*`` flags replace the file's tls block; ``--tls=false`` removes it."""
    tls_keys = [k for k in values if k.startswith("tls")]
    if not tls_keys:
        return
    opts.flags_set.add("tls")
    if values.get("tls") is False:
        opts.tls = None
        opts.tls_required = False
        return
    cert, key = values.get("tlscert", ""), values.get("tlskey", "")
    if not cert:
        raise FlagError("TLS Server certificate must be present and valid")
    if not key:
        raise FlagError("TLS Server private key must be present and valid")
    opts.tls = TLSConfig(cert_file=cert, key_file=key, ca_file=values.get("tlscacert", ""),
                         verify=bool(values.get("tlsverify", False)))
    opts.tls_required = not opts.allow_non_tls

