"""Typed access to parsed config values, with errors that name file:line:col.

``Field`` bundles a value with where it was written; its ``as_*`` methods check the type the
way nats-server expects it and raise ``ConfigError`` otherwise.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Iterator

from rillet.gocompat.goquote import go_quote, go_type, value_kind

from .errors import ConfigError, Position
from rillet.gocompat.gotime import parse_go_duration

from .values import ConfigList, ConfigMap



def _is_datetime(value: Any) -> bool:
    # (a datetime value exists only once the config parser has read one, which imports the module: an idle
    # server does not load datetime, issue 20)
    dt = sys.modules.get("datetime")
    return dt is not None and isinstance(value, dt.datetime)

_TYPE_NAMES = {bool: "boolean", int: "integer", float: "float", str: "string", dict: "map", list: "array"}


def type_name(value: Any) -> str:
    kind = value_kind(value)
    if kind is not None:
        return _TYPE_NAMES[kind]
    if _is_datetime(value):
        return "datetime"
    return type(value).__name__


def show(value: Any) -> str:
    """Short rendering of a value for messages."""
    if isinstance(value, str):
        return f'"{value}"' if len(value) <= 60 else f'"{value[:57]}..."'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return type_name(value)
    return str(value)


@dataclass
class Field:
    """One ``key: value`` of a parsed map (or one element of an array)."""
    key: str
    value: Any
    pos: Position | None
    used_var: bool = False  # the key was referenced as a $variable

    @property
    def name(self) -> str:
        return self.key.lower()

    def error(self, reason: str) -> ConfigError:
        return ConfigError.at(self.pos, reason)

    def wrong_type(self, expected: str) -> ConfigError:
        return self.error(
            f"{self.key}: expected {expected}, got {type_name(self.value)} {show(self.value)}")

    def not_go_type(self, wanted: str) -> ConfigError:
        """nats-server's words for a value of the wrong type: its type assertion fails and the panic is
        reported at the key (``interface conversion: interface {} is string, not int64``)."""
        got = "time.Time" if _is_datetime(self.value) else go_type(self.value)
        return self.error(f"interface conversion: interface {{}} is {got}, not {wanted}")

    def as_str(self) -> str:
        if not isinstance(self.value, str):
            raise self.not_go_type("string")
        return self.value

    def as_int(self) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.not_go_type("int64")
        return self.value

    def as_bool(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.not_go_type("bool")
        return self.value

    def as_number(self) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self.wrong_type("a number")
        return float(self.value)

    def as_map(self) -> ConfigMap:
        return self._container(dict, ConfigMap, "map[string]interface {}")

    def as_list(self) -> ConfigList:
        return self._container(list, ConfigList, "[]interface {}")

    def _container(self, kind: type, wrapper: Any, go_name: str) -> Any:
        """The value as ``wrapper`` (the positioned ConfigMap/ConfigList) when it is a ``kind``; else Go's
        "not a <go_name>" error."""
        if not isinstance(self.value, kind):
            raise self.not_go_type(go_name)
        if not isinstance(self.value, wrapper):
            return wrapper(self.value, position=self.pos)
        return self.value

    def as_str_list(self, what: str | None = None) -> list[str]:
        """A string or an array of strings."""
        if isinstance(self.value, str):
            return [self.value]
        out = []
        for item in self.items():
            if not isinstance(item.value, str):
                raise item.error(
                    f"{what or self.key}: expected strings in the array, got "
                    f"{type_name(item.value)} {show(item.value)}")
            out.append(item.value)
        return out

    def as_duration(self, warnings: list[ConfigError] | None = None) -> float:
        """A Go duration string, or (deprecated, with a warning) an integer of seconds.

        Anything else gets the same warning from nats-server and then fails as an int64 would."""
        if isinstance(self.value, str):
            return self.parse_duration_string(self.value)
        if warnings is not None:
            warnings.append(self.error(
                f"invalid use of field \"{self.key}\": {self.key} should be converted to a duration"))
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            return float(self.value)
        raise self.not_go_type("int64")

    def as_duration_string(self) -> float:
        """A Go duration string only (what nats-server wants for lame_duck_* keys)."""
        if not isinstance(self.value, str):
            raise self.not_go_type("string")
        return self.parse_duration_string(self.value)

    def as_seconds(self) -> float:
        """Seconds as an integer, a float or a duration string (auth and tls timeouts)."""
        if isinstance(self.value, str):
            return self.parse_duration_string(self.value)
        return self.as_number()

    def parse_duration_string(self, text: str) -> float:
        try:
            return parse_go_duration(text)
        except ValueError as e:
            raise self.error(f"error parsing {self.key}: {e}") from None

    def items(self) -> Iterator["Field"]:
        """The elements of an array value, each with its own position."""
        lst = self.as_list()
        for index, item in enumerate(lst):
            yield Field(f"{self.key}[{index}]", item, lst.pos(index) or self.pos)

    def entries(self) -> Iterator["Field"]:
        """The entries of a map value."""
        yield from fields_of(self.as_map())


def fields_of(m: dict) -> Iterator[Field]:
    """The entries of a parsed map as ``Field`` objects, in file order."""
    positions = getattr(m, "positions", {})
    default = getattr(m, "position", None)
    used = getattr(m, "used_vars", set())
    for key, value in m.items():
        yield Field(key, value, positions.get(key, default), key in used)


def unknown_field(f: Field, where: str = "") -> ConfigError:
    """nats-server's words, whatever the block (``where`` is not part of them)."""
    return f.error(f"unknown field {go_quote(f.key)}")
