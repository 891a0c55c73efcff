"""Turn a parsed configuration (see ``parser``) into an ``Options``.

Keys and aliases follow nats-server 2.x and are matched case-insensitively. Like
nats-server, an unknown key is an error unless it was used as a ``$variable``, a value of
the wrong type is an error naming file:line:col, and a few deprecated forms (an integer
where a duration is expected) are accepted with a warning kept in
``Options.config_warnings``. All problems of a file are collected; the raised
``ConfigError`` is the first and carries the full list in ``.errors``.

Settings nats-server knows but rillet does not act on are kept in ``Options.extra``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from rillet.config import options as defaults
from rillet.config.options import Options
from rillet.gocompat.goquote import go_type

from .auth_sections import AuthSections
from .cluster_section import write_timeout_policy
from .mqtt_section import MqttSection
from .operator_sections import OperatorSections
from .parser import parse_file, parse_string
from .subsystem_sections import SubsystemSections
from .typed import Field, fields_of

__all__ = ["build_options", "load_file", "load_string"]

MAX_INT32 = (1 << 31) - 1

# Top-level keys nats-server knows and Rillet refuses when loading a file: key -> why.
UNSUPPORTED_KEYS: dict[str, str] = {
    "prof_port": "Rillet has no profiling port",
    "prof_block_rate": "Rillet has no profiling port",
}


def load_file(path: str, options: Options | None = None, *,
              warnings_as_errors: bool = False) -> Options:
    """Parse the config file at ``path`` and build Options from it."""
    opts = options or Options()
    opts.config_file = path
    return build_options(parse_file(path), opts, warnings_as_errors=warnings_as_errors)


def load_string(text: str, filename: str = "<string>", options: Options | None = None, *,
                warnings_as_errors: bool = False) -> Options:
    return build_options(parse_string(text, filename), options,
                         warnings_as_errors=warnings_as_errors)


def build_options(config: Mapping[str, Any], options: Options | None = None, *,
                  warnings_as_errors: bool = False) -> Options:
    """Apply the parsed ``config`` to ``options`` (a fresh ``Options`` by default).

    ``warnings_as_errors`` is what nats-server's ``-t`` does: any warning fails the check.
    """
    builder = _Builder(options if options is not None else Options())
    builder.apply(config)
    return builder.finish(warnings_as_errors)


class _Builder(AuthSections, SubsystemSections, OperatorSections, MqttSection):
    """Top-level keys; the blocks are handled by the section classes."""

    def __init__(self, opts: Options):
        super().__init__(opts)
        self.top_handlers: dict[str, Callable[[Field], None]] = self._top_level_table()

    def apply(self, config: Mapping[str, Any]) -> None:
        for f in fields_of(config):
            self.guard(f, self.top_handlers.get(f.name))

    def _top_level_table(self) -> dict[str, Callable[[Field], None]]:
        s = self.setter
        table: dict[str, Callable[[Field], None]] = {
            "listen": self.listen,
            "port": s("port", "int", zero_default=defaults.DEFAULT_PORT),
            "host": s("host", "str"),
            "net": s("host", "str"),
            "client_advertise": s("client_advertise", "str"),
            "server_name": self.server_name,
            "http": self.http,
            "monitor": self.http,
            "https": self.https,
            "http_port": s("http_port", "int"),
            "monitor_port": s("http_port", "int"),
            "https_port": s("https_port", "int"),
            "http_base_path": s("http_base_path", "str"),
            "http_metrics": s("http_metrics", "bool"),
            "pid_file": s("pid_file", "str"),
            "pidfile": s("pid_file", "str"),
            "ports_file_dir": s("ports_file_dir", "str"),
            # limits
            "max_payload": s("max_payload", "int", defaults.DEFAULT_MAX_PAYLOAD, MAX_INT32),
            "max_control_line": s("max_control_line", "int", defaults.DEFAULT_MAX_CONTROL_LINE,
                                  MAX_INT32),
            "max_pending": s("max_pending", "int", defaults.DEFAULT_MAX_PENDING),
            "max_pending_total": s("max_pending_total", "int"),
            "max_connections": self.max_connections,
            "max_conn": self.max_connections,
            "max_subscriptions": s("max_subscriptions", "int"),
            "max_subs": s("max_subscriptions", "int"),
            "proxy_protocol": s("proxy_protocol", "bool"),
            "write_timeout": lambda f: setattr(self.o, "write_timeout", write_timeout_policy(f)),
            "max_sub_tokens": self.max_sub_tokens,
            "max_subscription_tokens": self.max_sub_tokens,
            "max_closed_clients": s("max_closed_clients", "int", 10000),
            "ping_interval": s("ping_interval", "duration", defaults.DEFAULT_PING_INTERVAL),
            "ping_max": s("ping_max", "int", defaults.DEFAULT_PING_MAX),
            "max_pings_outstanding": s("ping_max", "int", defaults.DEFAULT_PING_MAX),
            "write_deadline": s("write_deadline", "duration", defaults.DEFAULT_WRITE_DEADLINE),
            "lame_duck_duration": self.lame_duck_duration,
            "lame_duck_grace_period": self.lame_duck_grace_period,
            "disable_sublist_cache": s("disable_sublist_cache", "bool"),
            "no_sublist_cache": s("disable_sublist_cache", "bool"),
            "no_header_support": s("no_header_support", "bool"),
            "no_fast_producer_stall": s("no_fast_producer_stall", "bool"),
            # logging
            "debug": s("debug", "bool"),
            "trace": s("trace", "bool"),
            "trace_verbose": self.trace_verbose,
            "trace_headers": self.trace_headers,
            "max_traced_msg_len": s("max_traced_msg_len", "int"),
            "logtime": s("logtime", "bool"),
            "logtime_utc": s("logtime_utc", "bool"),
            "log_file": s("log_file", "str"),
            "logfile": s("log_file", "str"),
            "log_size_limit": s("log_size_limit", "int"),
            "logfile_size_limit": s("log_size_limit", "int"),
            "logfile_max_num": s("log_max_files", "int"),
            "log_max_num": s("log_max_files", "int"),
            "syslog": s("syslog", "bool"),
            "remote_syslog": s("remote_syslog", "str"),
            # security
            "authorization": self.authorization,
            "no_auth_user": s("no_auth_user", "str"),
            "default_sentinel": s("default_sentinel", "str"),
            "default_js_domain": self.default_js_domain,
            "accounts": self.accounts,
            "system_account": s("system_account", "str"),
            "system": s("system_account", "str"),
            "no_system_account": s("no_system_account", "bool"),
            "no_system": s("no_system_account", "bool"),
            "no_sys_acc": s("no_system_account", "bool"),
            "tls": self.top_tls,
            "ocsp": self.top_ocsp,
            "ocsp_cache": self.top_ocsp_cache,
            "allow_non_tls": s("allow_non_tls", "bool"),
            # subsystems
            "websocket": self.websocket,
            "mqtt": self.mqtt,
            "ws": self.websocket,
            "jetstream": self.jetstream,
            "store_dir": self.top_store_dir,
            "storedir": self.top_store_dir,
            "cluster": self.cluster,
            "gateway": self.gateway,  # rillet.config.gateway_section
            "leafnodes": self.leafnodes,
            "leaf": self.leafnodes,
            "mappings": self.mappings, "maps": self.mappings,
            "server_tags": self.server_tags,
            "server_metadata": self.server_metadata,
            "feature_flags": self.feature_flags,
            # operator mode
            "operator": self.operator, "operators": self.operator, "root": self.operator,
            "roots": self.operator, "root_operator": self.operator, "root_operators": self.operator,
            "resolver": self.resolver, "account_resolver": self.resolver, "accounts_resolver": self.resolver,
            "resolver_preload": self.resolver_preload,
            "resolver_tls": self.resolver_tls,
            "trusted": self.trusted_keys, "trusted_keys": self.trusted_keys,
            "proxies": self.proxies,
        }
        # Stored in Options.extra and read where they act: resolver_pinned_accounts by the operator mode,
        # the two report intervals with the cluster settings (warned about at start while clustering is
        # not active, see rillet.config.inactive).
        kept = {
            "resolver_pinned_accounts": "resolver_pinned_accounts",
            "connect_error_reports": "connect_error_reports",
            "reconnect_error_reports": "reconnect_error_reports",
        }
        for key, name in kept.items():
            table[key] = self.keep(name)
        # Known to nats-server, refused here (file:line:col) rather than accepted and ignored.
        for key, reason in UNSUPPORTED_KEYS.items():
            table[key] = self.refuse(reason)
        return table

    @staticmethod
    def refuse(reason: str) -> Callable[[Field], None]:
        def handler(f: Field) -> None:
            raise f.error(f'"{f.key}" is not supported: {reason}')
        return handler

    def listen(self, f: Field) -> None:
        host, port = self.host_port(f)
        self.o.host = host or defaults.DEFAULT_HOST
        self.o.port = port

    def http(self, f: Field) -> None:
        host, port = self.host_port(f)
        self.o.http_host = host
        self.o.http_port = port

    def https(self, f: Field) -> None:
        host, port = self.host_port(f)
        self.o.http_host = host
        self.o.https_port = port

    def server_name(self, f: Field) -> None:
        name = f.as_str()
        if " " in name:
            raise f.error("server name cannot contain spaces")
        self.o.server_name = name

    def max_connections(self, f: Field) -> None:
        # nats-server: 0 becomes -1, which refuses every client connection.
        value = f.as_int()
        self.o.max_connections = -1 if value == 0 else value

    def default_js_domain(self, f: Field) -> None:
        if not isinstance(f.value, dict):
            raise f.error(f"error default_js_domain config: unsupported type {go_type(f.value)}")
        self.o.default_js_domain = {e.key: e.as_str() for e in f.entries()}

    def max_sub_tokens(self, f: Field) -> None:
        # nats-server: a uint8, at least 1
        value = f.as_int()
        if value > 255:
            raise f.error(f"{f.key} value is too big")
        if value <= 0:
            raise f.error(f"{f.key} value can not be negative")
        self.o.max_sub_tokens = value

    def lame_duck_duration(self, f: Field) -> None:
        seconds = f.as_duration_string()
        if seconds < 30:
            raise f.error(f"invalid lame_duck_duration of {f.value}, minimum is 30 seconds")
        self.o.lame_duck_duration = seconds

    def lame_duck_grace_period(self, f: Field) -> None:
        seconds = f.as_duration_string()
        if seconds < 0:
            raise f.error("invalid lame_duck_grace_period, needs to be positive")
        self.o.lame_duck_grace_period = seconds or defaults.DEFAULT_LAME_DUCK_GRACE_PERIOD

    def trace_verbose(self, f: Field) -> None:
        self.o.trace_verbose = self.o.trace = f.as_bool()

    def trace_headers(self, f: Field) -> None:
        self.o.extra["trace_headers"] = self.o.trace = f.as_bool()

    def server_metadata(self, f: Field) -> None:
        """``server_metadata { key: "value" }`` (nats-server 2.12): strings shown in /varz and in the server
        info of system events (``metadata``); kept in ``Options.extra["server_metadata"]``."""
        if not isinstance(f.value, dict):
            raise f.error(f"error parsing metadata: unsupported type {go_type(f.value)}")
        md = self.o.extra.setdefault("server_metadata", {})
        for sub in f.entries():
            md[sub.key] = sub.as_str()

    def feature_flags(self, f: Field) -> None:
        """``feature_flags { name: bool }`` (nats-server 2.14+) -> ``Options.extra["feature_flags"]``. Rillet acts on
        ``js_ack_fc_v2`` (v2 ack and flow control reply subjects), ``js_api_reply_v2`` and ``js_snapshot_sources``
        (rillet.config.features); the others only at nats-server's default (refused otherwise); names nats-server
        does not know are ignored, as there."""
        from rillet.config.features import FEATURE_FLAGS, ONLY_DEFAULT, SUPPORTED
        if not isinstance(f.value, dict):
            raise f.error(f"error parsing feature flags: unsupported type {go_type(f.value)}")
        flags = self.o.extra.setdefault("feature_flags", {})
        for sub in f.entries():
            if not isinstance(sub.value, bool):
                raise sub.error(f'error parsing feature flag "{sub.key}": expected bool, got {go_type(sub.value)}')
            if sub.key in FEATURE_FLAGS and sub.key not in SUPPORTED and sub.value != FEATURE_FLAGS[sub.key]:
                raise sub.error(f'feature flag "{sub.key}: {str(sub.value).lower()}" is not supported: '
                                + ONLY_DEFAULT.get(sub.key, "Rillet has only nats-server's default behaviour for it"))
            flags[sub.key] = sub.value

    def server_tags(self, f: Field) -> None:
        for tag in f.as_str_list("server_tags"):
            tag = tag.strip().lower()
            if tag and tag not in self.o.tags:
                self.o.tags.append(tag)

    def mappings(self, f: Field) -> None:
        from .account_checks import check_mappings
        self.o.mappings = f.as_map()
        self.errors.extend(check_mappings(f))

    def gateway(self, f: Field) -> None:
        from .gateway_section import parse_gateway
        parse_gateway(self, f)

    def raw_map(self, attr: str, not_a_map: str) -> Callable[[Field], None]:
        """A block kept as parsed; ``not_a_map``: nats-server's words when it is not a map."""
        def handler(f: Field) -> None:
            if not isinstance(f.value, dict):
                raise f.error(f"{not_a_map}, got {go_type(f.value)}")
            setattr(self.o, attr, f.as_map())
        return handler

    def leafnodes(self, f: Field) -> None:
        from rillet.config.leaf_section import parse_leafnodes
        parse_leafnodes(self, f)

    def top_store_dir(self, f: Field) -> None:
        if self.store_dir_set:
            raise f.error("Duplicate 'store_dir' configuration")
        self.store_dir_set = True
        self.o.jetstream.store_dir = f.as_str()
