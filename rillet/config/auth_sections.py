"""The authorization, users, permissions and accounts sections of a config file."""
from __future__ import annotations

from typing import Any, Callable

from rillet.config.options import Options, Permission, Permissions, ResponsePermission, User
from rillet.gocompat.goquote import go_type

from .builder_base import BuilderBase
from .checks import is_valid_public_nkey, subject_problem
from .errors import ConfigError
from .typed import Field, unknown_field
from .values import ConfigMap

DEFAULT_RESPONSE_EXPIRES = 120.0  # seconds, nats-server's allow_responses default
CONNECTION_TYPES = {"STANDARD", "WEBSOCKET", "LEAFNODE", "LEAFNODE_WS", "MQTT", "MQTT_WS",
                    "IN_PROCESS"}
GLOBAL_ACCOUNT = "$G"


class AuthSections(BuilderBase):
    def _auth_callout(self, auth: dict, sub: Field) -> None:
        from .account_checks import check_auth_callout
        auth["auth_callout"] = sub.as_map()
        self.errors.extend(check_auth_callout(sub))

    def finish(self, warnings_as_errors: bool = False) -> Options:
        from .account_checks import check_auth_callout_accounts, check_latency_system_account
        self.errors.extend(check_auth_callout_accounts(self.o))
        accounts = getattr(self, "_accounts_field", None)
        if accounts is not None and self.o.no_system_account:
            self.errors.extend(check_latency_system_account(accounts))
        return super().finish(warnings_as_errors)

    def authorization(self, f: Field) -> None:
        auth = self.parse_authorization(f)
        o = self.o
        o.auth_block = True
        o.username = auth.get("user", "")
        o.password = auth.get("pass", "")
        o.authorization = auth.get("token", "")
        o.auth_timeout = auth.get("timeout", 0.0)
        if "auth_callout" in auth:
            o.extra["auth_callout"] = auth["auth_callout"]
        o.proxy_required = bool(auth.get("proxy_required", False))
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

    def parse_link_authorization(self, f: Field, kind: str) -> dict[str, Any]:
        """The ``authorization {}`` of a cluster or gateway block (``kind``: "Cluster", "Gateway"): one user,
        no tokens and no callouts, with nats-server's errors."""
        auth = self.parse_authorization(f)
        if "users" in auth:
            raise f.error(f"{kind} authorization does not allow multiple users")
        if auth.get("token"):
            raise f.error(f"{kind} authorization does not support tokens")
        if "auth_callout" in auth:
            raise f.error(f"{kind} authorization does not support callouts")
        return auth

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
            "auth_callout": lambda sub: self._auth_callout(auth, sub),
            "auth_hook": lambda sub: self._auth_callout(auth, sub),
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
                shown = item.value if isinstance(item.value, str) else repr(item.value)  # Go's %v
                self.errors.append(item.error(f"Expected user entry to be a map/struct, got {shown}"))
                continue
            user = User(account=account)
            entry_start = item  # nats-server reports the entry at the last of its keys (at the map if empty)
            for sub in item.entries():
                entry_start = sub
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
                user.proxy_required = sub.as_bool()
            elif not sub.used_var:
                raise unknown_field(sub, "user")
        return handle

    def proxies(self, f: Field) -> None:
        """``proxies { trusted: [{key: <nkey>}] }`` (nats-server 2.12): the proxies whose signature of the INFO
        nonce (the CONNECT's ``proxy_sig``) admits a connection as proxied; nats-server's errors."""
        if not isinstance(f.value, dict):
            raise f.error(f"expected proxies to be a map/struct, got {go_type(f.value)}")
        keys: list[str] = []
        for sub in f.entries():
            if sub.name != "trusted":
                if not sub.used_var:
                    self.errors.append(unknown_field(sub, "proxies"))
                continue
            if not isinstance(sub.value, list):
                self.errors.append(sub.error(
                    f"expected proxies' trusted field to be an array, got {go_type(sub.value)}"))
                continue
            for item in sub.items():
                if not isinstance(item.value, dict):
                    self.errors.append(item.error(
                        f"expected proxies' trusted entry to be a map/struct, got {go_type(item.value)}"))
                    continue
                for k in item.entries():
                    if k.name in ("key", "public_key"):
                        v = k.value if isinstance(k.value, str) else ""
                        if not any(is_valid_public_nkey(v, kind) for kind in "UANOC"):
                            self.errors.append(k.error(f'invalid proxy key "{k.value}"'))
                            continue
                        keys.append(v)
                    elif not k.used_var:
                        self.errors.append(unknown_field(k, "proxies' trusted entry"))
        self.o.proxies_trusted = keys

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
        if not self.errors:  # as nats-server: exports and imports are wired once the accounts are all known
            from .account_checks import check_accounts
            self.errors.extend(check_accounts(f))
            self._accounts_field = f

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
            elif name == "jetstream" and isinstance(sub.value, dict):
                for js in sub.entries():
                    # nats-server 2.11: "owner" moves the RAFT traffic of the account's streams and consumers into
                    # the account itself (rillet/jetstream/cluster/traffic.py); nats-server's words for the rest
                    if js.name != "cluster_traffic":
                        continue
                    if not isinstance(js.value, str):
                        self.errors.append(js.error(f"Expected either 'system' or 'owner' string value for "
                                                    f'"{js.key}", got {js.value}'))
                    elif js.value not in ("system", "owner", ""):
                        self.errors.append(js.error(f"Expected 'system' or 'owner' string value for "
                                                    f'"{js.key}", got {js.value}'))
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
