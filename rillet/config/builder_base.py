"""Shared machinery of the config-to-Options builder: error collection and typed setters."""
from __future__ import annotations

from typing import Any, Callable

from rillet.config.options import Options
from rillet.gocompat.goquote import go_type

from .errors import ConfigError
from .typed import Field, unknown_field


class BuilderBase:
    """State shared by the section builders: the Options being filled, errors, warnings."""

    def __init__(self, opts: Options):
        self.o = opts
        self.errors: list[ConfigError] = []
        self.warnings: list[ConfigError] = []
        self.store_dir_set = False
        self.seen_user_names: set[str] = {u.username for u in opts.users}
        self.seen_nkeys: set[str] = {u.nkey for u in opts.nkeys}
        # every dispatch table used through ``each`` (section name -> its keys): what a block accepts,
        # read by tests/test_config_keys.py so that no key is accepted without a test or a refusal
        self.section_keys: dict[str, set[str]] = {}

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
        self.section_keys.setdefault(where, set()).update(table)
        for sub in f.entries():
            self.guard(sub, table.get(sub.name), where)

    def finish(self, warnings_as_errors: bool = False) -> Options:
        o = self.o
        o.config_warnings = [str(w) for w in self.warnings]
        o.tls_required = o.tls is not None and not o.allow_non_tls
        if not self.errors and o.any_tls():  # (no tls block: nothing to staple, ocsp_section not loaded)
            from .ocsp_section import check_stapling
            staple_error = check_stapling(o)
            if staple_error is not None:
                self.errors.append(staple_error)
        if warnings_as_errors:
            self.errors.extend(self.warnings)
        if self.errors:
            first = self.errors[0]
            first.errors = list(self.errors)
            first.warnings = list(self.warnings)
            first.collected = True
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

    def open_block(self, f: Field, not_a_map: str, raw_attr: str, block: Any) -> Any:
        """Start parsing the block ``f`` into ``block`` (its options object, returned): ``f`` must be a map
        (else the error ``not_a_map``, nats-server's wording for that block, with the value's Go type); the
        map as written is kept in ``Options.<raw_attr>`` (monitoring shows it)."""
        if not isinstance(f.value, dict):
            raise f.error(f"{not_a_map}, got {go_type(f.value)}")
        setattr(self.o, raw_attr, f.as_map())
        return block

    def typed_keys(self, target: Callable[[], Any], **kinds: str) -> dict[str, Callable[[Field], None]]:
        """Handlers of keys that set the attribute of the same name on ``target()`` from a value of the given
        kind (``setter``'s): ``typed_keys(target, connect_retries="int", write_deadline="duration")``."""
        return {key: self.setter(key, kind, target=target) for key, kind in kinds.items()}

    def listener_keys(self, target: Callable[[], Any], listen: Callable[[Field], None],
                      authorization: Callable[[Field], None],
                      tls: Callable[[Field], None]) -> dict[str, Callable[[Field], None]]:
        """The keys the blocks of a listening port (cluster, gateway, leafnodes) share: where it listens,
        who may connect, its TLS and the address it advertises (set on ``target()``)."""
        return {
            "listen": listen,
            **self.typed_keys(target, port="int", host="str", advertise="str"),
            "net": self.setter("host", "str", target=target),
            "authorization": authorization,
            "tls": tls,
        }

    def host_port(self, f: Field) -> tuple[str, int]:
        """``listen``-style value: a port number or "host:port"."""
        if isinstance(f.value, int) and not isinstance(f.value, bool):
            return "", f.value
        if not isinstance(f.value, str):
            raise f.error(f"expected port or host:port, got {go_type(f.value)}")
        host, port = split_host_port(f.value)
        if port is None:
            raise f.error(f'could not parse address string "{f.value}"')
        try:
            return host, int(port)
        except ValueError:
            raise f.error(f'could not parse port "{port}"') from None


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
