"""A small parser for Go ``flag``-package command lines, for the commands that keep the flags of Go tools
(``rillet nkey`` as ``nk``, ``rillet top`` as ``nats-top``).

As Go's ``flag`` package: a flag is ``-name`` or ``--name``; a value follows as the next argument or after
``=``; a boolean flag takes a value only after ``=`` (``-pubout=false``); parsing stops at the first
argument that is not a flag, or after ``--``. ``-h``/``-help`` asks for the usage text.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from rillet.gocompat.goquote import go_bool


class FlagError(Exception):
    """A command line the flags do not accept (the message says which argument and why)."""


class HelpRequested(Exception):
    pass


@dataclass
class Flag:
    name: str
    kind: type  # bool, int or str
    default: Any
    help: str
    dest: str = ""


class FlagSet:
    def __init__(self) -> None:
        self.flags: dict[str, Flag] = {}

    def add(self, name: str, kind: type, default: Any, help: str, dest: str | None = None) -> None:
        self.flags[name] = Flag(name, kind, default, help, dest or name.replace("-", "_"))

    def defaults(self) -> dict[str, Any]:
        return {f.dest: f.default for f in self.flags.values()}

    def parse(self, argv: list[str]) -> tuple[dict[str, Any], list[str]]:
        """The values by ``dest`` and the arguments left after the flags."""
        values = self.defaults()
        i = 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                return values, argv[i + 1:]
            if len(arg) < 2 or arg[0] != "-":
                return values, argv[i:]
            name = arg[2:] if arg.startswith("--") else arg[1:]
            if not name or name[0] in "-=":
                raise FlagError(f"bad flag syntax: {arg}")
            value: str | None = None
            if "=" in name:
                name, value = name.split("=", 1)
            flag = self.flags.get(name)
            if flag is None:
                if name in ("h", "help"):
                    raise HelpRequested()
                raise FlagError(f"flag provided but not defined: -{name}")
            i += 1
            if flag.kind is bool:
                if value is None:
                    values[flag.dest] = True
                elif go_bool(value) is not None:
                    values[flag.dest] = go_bool(value)
                else:
                    raise FlagError(f'invalid boolean value "{value}" for -{name}')
                continue
            if value is None:
                if i >= len(argv):
                    raise FlagError(f"flag needs an argument: -{name}")
                value = argv[i]
                i += 1
            if flag.kind is int:
                try:
                    values[flag.dest] = int(value, 0)
                except ValueError:
                    raise FlagError(f'invalid value "{value}" for flag -{name}: parse error') from None
            else:
                values[flag.dest] = value
        return values, []

    def usage(self) -> str:
        lines = []
        for f in self.flags.values():
            arg = "" if f.kind is bool else (" int" if f.kind is int else " string")
            default = "" if f.default in ("", False, None) else f" (default {f.default})"
            lines.append(f"  -{f.name}{arg}\n    \t{f.help}{default}")
        return "\n".join(lines) + "\n"


def tool_version() -> str:
    """The version a Go-style tool prints for ``-version``: rillet's installed version, else ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rillet")
    except PackageNotFoundError:
        return "unknown"


def usage_error(tool: str, e: FlagError, usage: str) -> int:
    """As Go's flag package on a bad command line: the error, then the usage, on stderr; exit status 2."""
    print(f"rillet {tool}: {e}", file=sys.stderr)
    sys.stderr.write(usage)
    return 2
