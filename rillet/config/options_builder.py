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

from rillet.server import options as defaults
from rillet.server.options import (
    ClusterOptions,
    Options,
    Permission,
    Permissions,
    ResponsePermission,
    TLSConfig,
    User,
)

from .checks import is_valid_public_nkey, subject_problem
from .errors import ConfigError
from .parser import parse_file, parse_string
from .typed import Field, fields_of, unknown_field
from .values import ConfigMap

__all__ = ["build_options", "load_file", "load_string"]

MAX_INT32 = (1 << 31) - 1
TLS_HANDSHAKE_FIRST_FALLBACK = 0.05  # seconds, nats-server's "auto" fallback delay
DEFAULT_RESPONSE_EXPIRES = 120.0  # seconds, nats-server's allow_responses default
CONNECTION_TYPES = {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                    "IN_PROCESS"}
GLOBAL_ACCOUNT = "$G"


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


class _Builder:
    def __init__(self, opts: Options):
        self.o = opts
        self.errors: list[ConfigError] = []
        self.warnings: list[ConfigError] = []
        self.store_dir_set = False
        self.seen_user_names: set[str] = {u.username for u in opts.users}
        self.seen_nkeys: set[str] = {u.nkey for u in opts.nkeys}
        self.top_handlers: dict[str, Callable[[Field], None]] = self._top_level_table()

    # -- driver ---------------------------------------------------------------

    def apply(self, config: Mapping[str, Any]) -> None:
        for f in fields_of(config):
            handler = self.top_handlers.get(f.name)
            self.guard(f, handler)

    def guard(self, f: Field, handler: Callable[[Field], None] | None, where: str = "") -> None:
        """Run ``handler`` on ``f``, recording (not raising) a ConfigError."""
        try:
            if handler is None:
                if not f.used_var:
                    raise unknown_field(f, where)
                return
            handler(f)
        except ConfigError as e:
            self.errors.append(e)

    def each(self, f: Field, table: dict[str, Callable[[Field], None]], where: str) -> None:
        """Dispatch every entry of the map ``f`` through ``table`` (names are lower case)."""
        for sub in f.entries():
            self.guard(sub, table.get(sub.name), where)

    def finish(self, warnings_as_errors: bool = False) -> Options:
        o = self.o
        o.config_warnings = [str(w) for w in self.warnings]
        o.tls_required = o.tls is not None and not o.allow_non_tls
        if warnings_as_errors:
            self.errors.extend(self.warnings)
        if self.errors:
            first = self.errors[0]
            first.errors = list(self.errors)
            raise first
        return o

    def keep(self, name: str, check: Callable[[Field], Any] | None = None) -> Callable[[Field], None]:
        """A handler storing the value in ``Options.extra[name]`` (after an optional check)."""
        def handler(f: Field) -> None:
            self.o.extra[name] = check(f) if check else f.value
        return handler

    def setter(self, attr: str, kind: str, zero_default: Any = None, limit: int | None = None,
               target: Callable[[], Any] | None = None) -> Callable[[Field], None]:
        """A handler setting ``attr`` on Options (or on ``target()``) from a typed value.

        ``zero_default``: a 0 in the file means "use the default" (as in nats-server).
        ``limit``: the largest allowed value.
        """
        def handler(f: Field) -> None:
            if kind == "duration":
                value = f.as_duration(self.warnings)
            else:
                value = getattr(f, "as_" + kind)()
            if limit is not None and value > limit:
                raise f.error(f"{f.key} value is too big")
            if zero_default is not None and value == 0:
                value = zero_default
            setattr(target() if target else self.o, attr, value)
        return handler

    # -- top level ------------------------------------------------------------

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
            "pid_file": s("pid_file", "str"),
            "pidfile": s("pid_file", "str"),
            "ports_file_dir": s("ports_file_dir", "str"),
            # limits
            "max_payload": s("max_payload", "int", defaults.DEFAULT_MAX_PAYLOAD, MAX_INT32),
            "max_control_line": s("max_control_line", "int", defaults.DEFAULT_MAX_CONTROL_LINE,
                                  MAX_INT32),
            "max_pending": s("max_pending", "int", defaults.DEFAULT_MAX_PENDING),
            "max_connections": self.max_connections,
            "max_conn": self.max_connections,
            "max_subscriptions": s("max_subscriptions", "int"),
            "max_subs": s("max_subscriptions", "int"),
            "max_closed_clients": s("max_closed_clients", "int", 10000),
            "max_traced_msg_len": s("max_traced_msg_len", "int"),
            "ping_interval": s("ping_interval", "duration", defaults.DEFAULT_PING_INTERVAL),
            "ping_max": s("ping_max", "int", defaults.DEFAULT_PING_MAX),
            "max_pings_outstanding": s("ping_max", "int", defaults.DEFAULT_PING_MAX),
            "write_deadline": s("write_deadline", "duration", defaults.DEFAULT_WRITE_DEADLINE),
            "lame_duck_duration": self.lame_duck_duration,
            "lame_duck_grace_period": self.lame_duck_grace_period,
            "disable_sublist_cache": s("disable_sublist_cache", "bool"),
            "no_sublist_cache": s("disable_sublist_cache", "bool"),
            "no_header_support": s("no_header_support", "bool"),
            # logging
            "debug": s("debug", "bool"),
            "trace": s("trace", "bool"),
            "trace_verbose": self.trace_verbose,
            "trace_headers": self.trace_headers,
            "logtime": s("logtime", "bool"),
            "logtime_utc": s("logtime_utc", "bool"),
            "log_file": s("log_file", "str"),
            "logfile": s("log_file", "str"),
            "log_size_limit": s("log_size_limit", "int"),
            "logfile_size_limit": s("log_size_limit", "int"),
            "syslog": s("syslog", "bool"),
            "remote_syslog": s("remote_syslog", "str"),
            # security
            "authorization": self.authorization,
            "no_auth_user": s("no_auth_user", "str"),
            "accounts": self.accounts,
            "system_account": s("system_account", "str"),
            "system": s("system_account", "str"),
            "no_system_account": s("no_system_account", "bool"),
            "no_system": s("no_system_account", "bool"),
            "no_sys_acc": s("no_system_account", "bool"),
            "tls": self.top_tls,
            "allow_non_tls": s("allow_non_tls", "bool"),
            # subsystems
            "websocket": self.websocket,
            "ws": self.websocket,
            "jetstream": self.jetstream,
            "store_dir": self.top_store_dir,
            "storedir": self.top_store_dir,
            "cluster": self.cluster,
            "gateway": self.raw_map("gateway"),
            "leafnodes": self.raw_map("leafnodes"),
            "leaf": self.raw_map("leafnodes"),
            "mqtt": self.raw_map("mqtt"),
            "mappings": self.raw_map("mappings"),
            "maps": self.raw_map("mappings"),
            "server_tags": self.server_tags,
        }
        # Known to nats-server, stored for later work without acting on them.
        kept = {
            "logfile_max_num": "log_max_num", "log_max_num": "log_max_num",
            "prof_port": "prof_port", "prof_block_rate": "prof_block_rate",
            "proxy_protocol": "proxy_protocol",
            "max_sub_tokens": "max_sub_tokens", "max_subscription_tokens": "max_sub_tokens",
            "write_timeout": "write_timeout",
            "ocsp": "ocsp", "ocsp_cache": "ocsp_cache",
            "operator": "operator", "operators": "operator", "root": "operator",
            "roots": "operator", "root_operator": "operator", "root_operators": "operator",
            "resolver": "resolver", "account_resolver": "resolver",
            "accounts_resolver": "resolver",
            "resolver_tls": "resolver_tls", "resolver_preload": "resolver_preload",
            "resolver_pinned_accounts": "resolver_pinned_accounts",
            "trusted": "trusted_keys", "trusted_keys": "trusted_keys",
            "connect_error_reports": "connect_error_reports",
            "reconnect_error_reports": "reconnect_error_reports",
            "server_metadata": "server_metadata", "feature_flags": "feature_flags",
            "default_js_domain": "default_js_domain",
            "no_fast_producer_stall": "no_fast_producer_stall",
            "proxies": "proxies", "default_sentinel": "default_sentinel",
        }
        for key, name in kept.items():
            table[key] = self.keep(name)
        return table

    def host_port(self, f: Field) -> tuple[str, int]:
        """``listen``-style value: a port number or "host:port"."""
        if isinstance(f.value, int) and not isinstance(f.value, bool):
            return "", f.value
        if not isinstance(f.value, str):
            raise f.wrong_type("a port or \"host:port\"")
        host, port = split_host_port(f.value)
        if port is None:
            raise f.error(f'could not parse address string "{f.value}"')
        try:
            return host, int(port)
        except ValueError:
            raise f.error(f'could not parse port "{port}"') from None

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

    def server_tags(self, f: Field) -> None:
        for tag in f.as_str_list("server_tags"):
            tag = tag.strip().lower()
            if tag and tag not in self.o.tags:
                self.o.tags.append(tag)

    def raw_map(self, attr: str) -> Callable[[Field], None]:
        def handler(f: Field) -> None:
            setattr(self.o, attr, f.as_map())
        return handler

    def top_store_dir(self, f: Field) -> None:
        if self.store_dir_set:
            raise f.error("duplicate 'store_dir' configuration")
        self.store_dir_set = True
        self.o.jetstream.store_dir = f.as_str()

    # -- authorization and users ----------------------------------------------

    def authorization(self, f: Field) -> None:
        auth = self.parse_authorization(f)
        o = self.o
        o.username = auth.get("user", "")
        o.password = auth.get("pass", "")
        o.authorization = auth.get("token", "")
        o.auth_timeout = auth.get("timeout", 0.0)
        for key in ("auth_callout", "proxy_required"):
            if key in auth:
                o.extra[key] = auth[key]
        if (o.username or o.password) and o.authorization:
            raise f.error("Cannot have a user/pass and token")
        users: list[User] | None = auth.get("users")
        nkeys: list[User] = auth.get("nkeys", [])
        if users is not None or self.seen_user_names or self.seen_nkeys:
            if o.username:
                raise f.error("Can not have a single user/pass and a users array")
            if o.authorization:
                raise f.error("Can not have a token and a users array")
        for user in users or []:
            if user.username in self.seen_user_names:
                raise f.error(f'Duplicate user "{user.username}" detected')
            self.seen_user_names.add(user.username)
            o.users.append(user)
        for user in nkeys:
            if user.nkey in self.seen_nkeys:
                raise f.error(f'Duplicate nkey "{user.nkey}" detected')
            self.seen_nkeys.add(user.nkey)
            o.nkeys.append(user)

    def parse_authorization(self, f: Field) -> dict[str, Any]:
        """The fields of an ``authorization {}`` block (also used by cluster)."""
        auth: dict[str, Any] = {}
        default_perms: Permissions | None = None

        def timeout(sub: Field) -> None:
            seconds = sub.as_seconds()
            if seconds > 60:
                self.warnings.append(sub.error(
                    f"timeout of {sub.value} ({seconds:g} seconds) is high, consider keeping it "
                    "under 60 seconds; an unquoted duration such as 1m is a number, use '1m'"))
            auth["timeout"] = seconds

        def users(sub: Field) -> None:
            nkeys, plain = self.parse_users(sub)
            auth["users"], auth["nkeys"] = plain, nkeys

        def permissions(sub: Field) -> None:
            nonlocal default_perms
            default_perms = self.parse_permissions(sub)
            auth["permissions"] = default_perms

        def store(name: str, kind: str) -> Callable[[Field], None]:
            return lambda sub: auth.__setitem__(name, getattr(sub, "as_" + kind)())

        table = {
            "user": store("user", "str"), "username": store("user", "str"),
            "pass": store("pass", "str"), "password": store("pass", "str"),
            "token": store("token", "str"),
            "timeout": timeout,
            "users": users,
            "default_permission": permissions, "default_permissions": permissions,
            "permissions": permissions,
            "auth_callout": lambda sub: auth.__setitem__("auth_callout", sub.as_map()),
            "auth_hook": lambda sub: auth.__setitem__("auth_callout", sub.as_map()),
            "proxy_required": store("proxy_required", "bool"),
        }
        self.each(f, table, "authorization")
        if default_perms is not None:
            for user in auth.get("users", []) + auth.get("nkeys", []):
                if user.permissions is None:
                    user.permissions = default_perms
        return auth

    def parse_users(self, f: Field, account: str = "") -> tuple[list[User], list[User]]:
        """A ``users: [...]`` array: returns (nkey users, user/password users)."""
        if not isinstance(f.value, list):
            raise f.error(f"Expected users field to be an array, got {f.value!r}")
        nkeys: list[User] = []
        users: list[User] = []
        for item in f.items():
            if not isinstance(item.value, dict):
                self.errors.append(item.error(
                    f"Expected user entry to be a map/struct, got {item.value!r}"))
                continue
            user = User(account=account)
            entry_start = item
            for sub in item.entries():
                self.guard(sub, self.user_field_handler(user), "user")
            if not user.nkey and not user.username:
                raise entry_start.error("User entry requires a user")
            if user.nkey:
                if not is_valid_public_nkey(user.nkey, "U"):
                    raise entry_start.error("Not a valid public nkey for a user")
                if user.username or user.password:
                    raise entry_start.error("Nkey users do not take usernames or passwords")
                nkeys.append(user)
            else:
                users.append(user)
        return nkeys, users

    def user_field_handler(self, user: User) -> Callable[[Field], None] | None:
        def handle(sub: Field) -> None:
            name = sub.name
            if name == "nkey":
                user.nkey = sub.as_str()
            elif name in ("user", "username"):
                user.username = sub.as_str()
            elif name in ("pass", "password"):
                user.password = sub.as_str()
            elif name in ("permission", "permissions", "authorization"):
                user.permissions = self.parse_permissions(sub)
            elif name in ("allowed_connection_types", "connection_types", "clients"):
                user.allowed_connection_types = self.connection_types(sub)
            elif name == "proxy_required":
                sub.as_bool()  # accepted, not acted on
            elif not sub.used_var:
                raise unknown_field(sub, "user")
        return handle

    def connection_types(self, f: Field) -> list[str]:
        types = [t.upper() for t in f.as_str_list("allowed connection types")]
        unknown = [t for t in types if t not in CONNECTION_TYPES]
        if unknown:
            raise f.error(f"invalid connection types {unknown}")
        return types

    def parse_permissions(self, f: Field) -> Permissions:
        if not isinstance(f.value, dict):
            raise f.error(f"Expected permissions to be a map/struct, got {f.value!r}")
        perms = Permissions()
        for sub in f.entries():
            name = sub.name
            try:
                if name in ("pub", "publish", "import"):
                    perms.publish = self.subject_permission(sub, allow_queue=False)
                elif name in ("sub", "subscribe", "export"):
                    perms.subscribe = self.subject_permission(sub, allow_queue=True)
                elif name in ("publish_allow_responses", "allow_responses"):
                    perms.response = self.response_permission(sub)
                    if perms.response is not None:
                        if perms.publish is None:
                            perms.publish = Permission()
                        if perms.publish.allow is None:
                            perms.publish.allow = []  # no blanket publish allow any more
                elif not sub.used_var:
                    raise sub.error(f'Unknown field "{sub.key}" parsing permissions')
            except ConfigError as e:
                self.errors.append(e)
        return perms

    def subject_permission(self, f: Field, allow_queue: bool) -> Permission | None:
        """A subject, a list of subjects (= allow), or ``{allow: ..., deny: ...}``."""
        if not isinstance(f.value, dict):
            return Permission(allow=self.subjects(f, allow_queue))
        if not f.value:
            return None
        perm = Permission()
        for sub in f.entries():
            if sub.name == "allow":
                perm.allow = self.subjects(sub, allow_queue)
            elif sub.name == "deny":
                perm.deny = self.subjects(sub, allow_queue)
            elif not sub.used_var:
                raise sub.error(f'Unknown field name "{sub.key}" parsing subject permissions, '
                                "only 'allow' or 'deny' are permitted")
        return perm

    def subjects(self, f: Field, allow_queue: bool) -> list[str]:
        if not isinstance(f.value, (str, list)):
            raise f.error("Expected subject permissions to be a subject, or array of subjects")
        subjects = f.as_str_list("permissions")
        for subject in subjects:
            problem = subject_problem(subject, allow_queue)
            if problem:
                raise f.error(problem)
        return subjects

    def response_permission(self, f: Field) -> ResponsePermission | None:
        if isinstance(f.value, bool):
            return ResponsePermission(expires=DEFAULT_RESPONSE_EXPIRES) if f.value else None
        if not isinstance(f.value, dict):
            raise f.error("error parsing response permissions, expected a boolean or a map")
        rp = ResponsePermission(expires=DEFAULT_RESPONSE_EXPIRES)
        for sub in f.entries():
            if sub.name in ("max", "max_msgs", "max_messages", "max_responses"):
                value = sub.as_int()
                if value != 0:  # negative = unlimited, 0 = default
                    rp.max_msgs = value
            elif sub.name in ("expires", "expiration", "ttl"):
                if not isinstance(sub.value, str):
                    raise sub.error("error parsing expires, not a duration string")
                seconds = sub.as_duration_string()
                if seconds != 0:
                    rp.expires = seconds
            elif not sub.used_var:
                raise sub.error(f'Unknown field "{sub.key}" parsing permissions')
        return rp

    # -- accounts -------------------------------------------------------------

    ACCOUNT_KEYS = {"nkey", "imports", "exports", "jetstream", "users", "default_permissions",
                    "mappings", "maps", "limits", "msg_trace", "trace_dest"}

    def accounts(self, f: Field) -> None:
        o = self.o
        if isinstance(f.value, list):
            names: dict[str, Any] = {}
            for item in f.items():
                if not isinstance(item.value, str):
                    raise item.wrong_type("an account name")
                if item.value == GLOBAL_ACCOUNT:
                    raise item.error(f'"{item.value}" is a Reserved Account')
                if item.value in names:
                    raise item.error(f"Duplicate Account Entry: {item.value}")
                names[item.value] = ConfigMap(position=item.pos)
            o.accounts = names
            return
        o.accounts = f.as_map()
        for acc in f.entries():
            if acc.used_var:
                continue  # a $variable defined inside the accounts block
            self.guard(acc, self.account)

    def account(self, acc: Field) -> None:
        if not isinstance(acc.value, dict):
            raise acc.error("Expected map entries for accounts")
        if acc.key == GLOBAL_ACCOUNT:
            raise acc.error(f'"{acc.key}" is a Reserved Account')
        users_field: Field | None = None
        default_perms: Permissions | None = None
        for sub in acc.entries():
            name = sub.name
            if name == "users":
                users_field = sub
            elif name == "default_permissions":
                try:
                    default_perms = self.parse_permissions(sub)
                except ConfigError as e:
                    self.errors.append(e)
            elif name == "nkey":
                if not isinstance(sub.value, str) or not is_valid_public_nkey(sub.value, "A"):
                    self.errors.append(sub.error(
                        f"Not a valid public nkey for an account: {sub.value!r}"))
            elif name not in self.ACCOUNT_KEYS and not sub.used_var:
                self.errors.append(unknown_field(sub, f'account "{acc.key}"'))
        if users_field is None:
            return
        nkeys, users = self.parse_users(users_field, account=acc.key)
        if not (nkeys or users):
            return
        if self.o.username:
            raise users_field.error("Can not have a single user/pass and accounts")
        if self.o.authorization:
            raise users_field.error("Can not have a token and accounts")
        for user in users + nkeys:
            if user.permissions is None and default_perms is not None:
                user.permissions = default_perms
        for user in nkeys:
            if user.nkey in self.seen_nkeys:
                raise users_field.error(f'Duplicate nkey "{user.nkey}" detected')
            self.seen_nkeys.add(user.nkey)
            self.o.nkeys.append(user)
        for user in users:
            if user.username in self.seen_user_names:
                raise users_field.error(f'Duplicate user "{user.username}" detected')
            self.seen_user_names.add(user.username)
            self.o.users.append(user)

    # -- tls ------------------------------------------------------------------

    def top_tls(self, f: Field) -> None:
        self.o.tls = self.parse_tls(f, client_side=True)

    def parse_tls(self, f: Field, client_side: bool) -> TLSConfig:
        tls = TLSConfig()
        prefix = "error parsing tls config"

        def filename(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                if not isinstance(sub.value, str):
                    raise sub.error(f"{prefix}, expected '{sub.key}' to be filename")
                setattr(tls, attr, sub.value)
            return handler

        def boolean(sub: Field) -> bool:
            if not isinstance(sub.value, bool):
                raise sub.error(f"{prefix}, expected '{sub.key}' to be a boolean")
            return sub.value

        def set_bool(attr: str) -> Callable[[Field], None]:
            return lambda sub: setattr(tls, attr, boolean(sub))

        def verify_and_map(sub: Field) -> None:
            tls.verify_and_map = boolean(sub)
            tls.verify = tls.verify or tls.verify_and_map

        def check_known_urls(sub: Field) -> None:
            value = boolean(sub)
            if value and client_side:
                raise sub.error("verify_cert_and_check_known_urls not supported in this context")
            tls.verify = tls.verify or value
            tls.extra["verify_cert_and_check_known_urls"] = value

        def names(attr: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                values = sub.as_str_list()
                if not values:
                    raise sub.error(f"{prefix}, '{sub.key}' cannot be empty")
                setattr(tls, attr, values)
            return handler

        def timeout(sub: Field) -> None:
            tls.timeout = sub.as_seconds() or defaults.DEFAULT_TLS_TIMEOUT

        def pinned(sub: Field) -> None:
            if not isinstance(sub.value, list):
                raise sub.error(f"{prefix}, expected 'pinned_certs' to be a list of hex-encoded "
                                "sha256 of DER encoded SubjectPublicKeyInfo")
            certs = []
            for entry in sub.as_str_list():
                entry = entry.lower()
                if len(entry) != 64 or any(c not in "0123456789abcdef" for c in entry):
                    raise sub.error(f"{prefix}, 'pinned_certs' key {entry} does not look like "
                                    "hex-encoded sha256 of DER encoded SubjectPublicKeyInfo")
                certs.append(entry)
            tls.pinned_certs = certs

        def handshake_first(sub: Field) -> None:
            value = sub.value
            if isinstance(value, bool):
                tls.handshake_first = value
                return
            if not isinstance(value, str):
                raise sub.error(f'field "{sub.key}" should be a boolean or a string, '
                                f"got {type(value).__name__}")
            word = value.lower()
            if word in ("true", "on"):
                tls.handshake_first = True
            elif word in ("false", "off"):
                tls.handshake_first = False
            elif word in ("auto", "auto_fallback"):
                tls.handshake_first = True
                tls.handshake_first_fallback = TLS_HANDSHAKE_FIRST_FALLBACK
            else:
                try:
                    tls.handshake_first_fallback = sub.as_duration_string()
                except ConfigError:
                    raise sub.error(f'field "{sub.key}"\'s value "{value}" is invalid') from None
                tls.handshake_first = True

        def extra(sub: Field) -> None:
            tls.extra[sub.name] = sub.value

        table: dict[str, Callable[[Field], None]] = {
            "cert_file": filename("cert_file"),
            "key_file": filename("key_file"),
            "ca_file": filename("ca_file"),
            "insecure": set_bool("insecure"),
            "verify": set_bool("verify"),
            "verify_and_map": verify_and_map,
            "verify_cert_and_check_known_urls": check_known_urls,
            "cipher_suites": names("ciphers"),
            "curve_preferences": names("curve_preferences"),
            "timeout": timeout,
            "pinned_certs": pinned,
            "handshake_first": handshake_first,
            "first": handshake_first,
            "immediate": handshake_first,
        }
        for key in ("allow_insecure_cipher_suites", "connection_rate_limit", "cert_store",
                    "cert_match_by", "cert_match", "ca_certs_match", "cert_match_skip_invalid",
                    "ocsp_peer", "certs", "certificates", "min_version"):
            table[key] = extra
        for sub in f.entries():
            handler = table.get(sub.name)
            if handler is None:
                raise sub.error(f'{prefix}, unknown field "{sub.key}"')
            handler(sub)
        return tls

    # -- websocket ------------------------------------------------------------

    def websocket(self, f: Field) -> None:
        ws = self.o.websocket
        s = self.setter
        target = lambda: ws  # noqa: E731

        def listen(sub: Field) -> None:
            ws.host, ws.port = self.host_port(sub)

        def tls(sub: Field) -> None:
            ws.tls = self.parse_tls(sub, client_side=True)

        def origins(sub: Field) -> None:
            ws.allowed_origins = sub.as_str_list("allowed origins")

        def handshake_timeout(sub: Field) -> None:
            if isinstance(sub.value, int) and not isinstance(sub.value, bool):
                ws.handshake_timeout = float(sub.value)
            elif isinstance(sub.value, str):
                ws.handshake_timeout = sub.as_duration_string()
            else:
                raise sub.error(f"error parsing handshake timeout: unsupported type "
                                f"{type(sub.value).__name__}")

        def authorization(sub: Field) -> None:
            auth = self.simple_auth(sub)
            ws.username = auth.get("user", "")
            ws.password = auth.get("pass", "")
            ws.token = auth.get("token", "")
            ws.auth_timeout = auth.get("timeout", 0.0)

        def headers(sub: Field) -> None:
            values = {}
            for h in sub.entries():
                values[h.key] = h.as_str()
            ws.headers = values

        def extra_str(sub: Field) -> None:
            ws.extra[sub.name] = sub.as_str()

        def ping_interval(sub: Field) -> None:
            ws.extra["ping_interval"] = sub.as_duration(self.warnings)

        table = {
            "listen": listen,
            "port": s("port", "int", target=target),
            "host": s("host", "str", target=target),
            "net": s("host", "str", target=target),
            "advertise": s("advertise", "str", target=target),
            "no_tls": s("no_tls", "bool", target=target),
            "tls": tls,
            "same_origin": s("same_origin", "bool", target=target),
            "handshake_timeout": handshake_timeout,
            "compress": s("compression", "bool", target=target),
            "compression": s("compression", "bool", target=target),
            "authorization": authorization,
            "authentication": authorization,
            "jwt_cookie": s("jwt_cookie", "str", target=target),
            "user_cookie": extra_str,
            "pass_cookie": extra_str,
            "token_cookie": extra_str,
            "no_auth_user": s("no_auth_user", "str", target=target),
            "headers": headers,
            "ping_interval": ping_interval,
        }
        for alias in ("allowed_origins", "allowed_origin", "allow_origins", "allow_origin",
                      "origins", "origin"):
            table[alias] = origins
        f.as_map()
        self.each(f, table, "websocket")

    def simple_auth(self, f: Field) -> dict[str, Any]:
        """user/pass/token/timeout only (websocket, mqtt, leafnode style)."""
        auth: dict[str, Any] = {}
        table = {
            "user": lambda sub: auth.__setitem__("user", sub.as_str()),
            "username": lambda sub: auth.__setitem__("user", sub.as_str()),
            "pass": lambda sub: auth.__setitem__("pass", sub.as_str()),
            "password": lambda sub: auth.__setitem__("pass", sub.as_str()),
            "token": lambda sub: auth.__setitem__("token", sub.as_str()),
            "timeout": lambda sub: auth.__setitem__("timeout", sub.as_seconds()),
        }
        f.as_map()
        self.each(f, table, "authorization")
        return auth

    # -- jetstream ------------------------------------------------------------

    def jetstream(self, f: Field) -> None:
        js = self.o.jetstream
        if isinstance(f.value, bool):
            js.enabled = f.value
            return
        if isinstance(f.value, str):
            word = f.value.lower()
            if word in ("enabled", "enable"):
                js.enabled = True
            elif word in ("disabled", "disable"):
                js.enabled = False
            else:
                raise f.error(f"Expected 'enabled' or 'disabled' for string value, got '{f.value}'")
            return
        if not isinstance(f.value, dict):
            raise f.error("Expected map, bool or string to define JetStream, got "
                          f"{type(f.value).__name__}")
        enabled = True

        def store_dir(sub: Field) -> None:
            if self.store_dir_set:
                raise sub.error("duplicate 'store_dir' configuration")
            self.store_dir_set = True
            js.store_dir = sub.as_str()

        def sync(sub: Field) -> None:
            if isinstance(sub.value, str) and sub.value.lower() == "always":
                js.sync_interval = "always"
            else:
                js.sync_interval = sub.as_duration(self.warnings)

        def size(attr: str, label: str) -> Callable[[Field], None]:
            def handler(sub: Field) -> None:
                setattr(js, attr, storage_size(sub, label))
            return handler

        def enable(sub: Field) -> None:
            nonlocal enabled
            enabled = sub.as_bool()

        def domain(sub: Field) -> None:
            js.domain = sub.as_str()

        def unique_tag(sub: Field) -> None:
            js.unique_tag = sub.as_str().strip().lower()

        def extra(sub: Field) -> None:
            js.extra[sub.name] = sub.value

        table: dict[str, Callable[[Field], None]] = {
            "store": store_dir, "store_dir": store_dir, "storedir": store_dir,
            "sync": sync, "sync_interval": sync,
            "max_memory_store": size("max_memory_store", "max_mem_store"),
            "max_mem_store": size("max_memory_store", "max_mem_store"),
            "max_mem": size("max_memory_store", "max_mem_store"),
            "max_file_store": size("max_file_store", "max_file_store"),
            "max_file": size("max_file_store", "max_file_store"),
            "domain": domain,
            "enable": enable, "enabled": enable,
            "unique_tag": unique_tag,
        }
        for key in ("strict", "key", "ek", "encryption_key", "prev_key", "prev_ek",
                    "prev_encryption_key", "cipher", "extension_hint", "limits", "tpm",
                    "max_outstanding_catchup", "max_buffered_size", "max_buffered_msgs",
                    "request_queue_limit", "info_queue_limit", "meta_compact",
                    "meta_compact_size", "meta_compact_sync", "max_concurrent_io"):
            table[key] = extra
        self.each(f, table, "jetstream")
        js.enabled = enabled

    # -- cluster --------------------------------------------------------------

    def cluster(self, f: Field) -> None:
        if not isinstance(f.value, dict):
            raise f.error(f"Expected map to define cluster, got {type(f.value).__name__}")
        cl: ClusterOptions = self.o.cluster
        s = self.setter
        target = lambda: cl  # noqa: E731

        def name(sub: Field) -> None:
            value = sub.as_str()
            if " " in value:
                raise sub.error("cluster name cannot contain spaces")
            cl.name = value

        def listen(sub: Field) -> None:
            cl.host, cl.port = self.host_port(sub)

        def authorization(sub: Field) -> None:
            auth = self.parse_authorization(sub)
            if "users" in auth:
                raise sub.error("Cluster authorization does not allow multiple users")
            if auth.get("token"):
                raise sub.error("Cluster authorization does not support tokens")
            if "auth_callout" in auth:
                raise sub.error("Cluster authorization does not support callouts")
            cl.username = auth.get("user", "")
            cl.password = auth.get("pass", "")
            cl.auth_timeout = auth.get("timeout", 0.0)
            if auth.get("permissions") is not None:
                self.warnings.append(sub.error(
                    'setting "permissions" within cluster authorization block is deprecated'))
                cl.extra.setdefault("permissions", auth["permissions"])

        def routes(sub: Field) -> None:
            if not isinstance(sub.value, list):
                raise sub.wrong_type("an array of route URLs")
            cl.routes = sub.as_str_list("routes")

        def tls(sub: Field) -> None:
            cl.tls = self.parse_tls(sub, client_side=False)

        def permissions(sub: Field) -> None:
            perms = self.parse_permissions(sub)
            if perms.response is not None:
                raise sub.error("Cluster permissions do not support dynamic responses")
            cl.extra["permissions"] = perms

        def duration(sub: Field) -> None:
            cl.extra[sub.name] = sub.as_duration(self.warnings)

        def extra(sub: Field) -> None:
            cl.extra[sub.name] = sub.value

        table: dict[str, Callable[[Field], None]] = {
            "name": name,
            "listen": listen,
            "port": s("port", "int", target=target),
            "host": s("host", "str", target=target),
            "net": s("host", "str", target=target),
            "authorization": authorization,
            "routes": routes,
            "tls": tls,
            "advertise": s("advertise", "str", target=target),
            "cluster_advertise": s("advertise", "str", target=target),
            "no_advertise": s("no_advertise", "bool", target=target),
            "connect_retries": s("connect_retries", "int", target=target),
            "pool_size": s("pool_size", "int", target=target),
            "permissions": permissions,
            "ping_interval": duration,
            "write_deadline": duration,
        }
        for key in ("connect_backoff", "accounts", "compression", "ping_max", "write_timeout"):
            table[key] = extra
        self.each(f, table, "cluster")


def storage_size(f: Field, label: str) -> int:
    """JetStream sizes: an integer, or a string like "1G" (K/M/G/T, powers of 1024)."""
    if isinstance(f.value, int) and not isinstance(f.value, bool):
        return f.value
    if not isinstance(f.value, str):
        raise f.error(f"{label} must be int64 or string")
    text = f.value
    if text == "":
        return 0
    shifts = {"K": 10, "M": 20, "G": 30, "T": 40}
    number, suffix = text[:-1], text[-1]
    try:
        value = int(number)
    except ValueError:
        raise f.error(f'{label} invalid size "{text}"') from None
    if suffix not in shifts:
        raise f.error(f"{label} sizes defined as strings must end in K, M, G, T")
    return value << shifts[suffix]


def split_host_port(text: str) -> tuple[str, str | None]:
    """Split "host:port" or "[v6]:port" like Go's net.SplitHostPort; port None if missing."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or not text[end + 1:].startswith(":"):
            return text, None
        return text[1:end], text[end + 2:]
    host, sep, port = text.rpartition(":")
    if not sep or ":" in host:
        return text, None
    return host, port
