"""Modules imported a few at a time, one loop pass after another, instead of all in one callback.

An idle server with JetStream loads none of the API's machinery (the router, the stream, consumer and store
modules, msgspec: issue 20's idle RSS); the first ``$JS.API`` request brings them in. Imported at once that
is ~70 modules and 70-170 ms in which the loop serves nobody (a bystander's request/reply waited 110 ms
behind the first burst of API requests). Here they are imported leaves first, one module per step and
steps for ``BUDGET`` seconds per loop pass, so the longest hold is the slowest single module (msgspec's,
~5 ms); the requests that arrive meanwhile wait in the API queue (``rillet.jetstream.api.queue``).

The order comes from the modules' own source: the imports at the top level of each ``rillet`` module
(``import x`` / ``from x import y`` at the start of a line; those inside functions or ``if TYPE_CHECKING``
blocks are indented and left alone), followed depth first, a module after its package and after what it
imports. Another library's module is one step with whatever it imports. An import this misses is done
inside the step of the module that imports it; nothing depends on the order being complete.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import time
from typing import Any, Callable, Iterator

BUDGET = 0.001  # seconds of importing per loop pass (then at most one more module)

_FROM = re.compile(r"^from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_IMPORT = re.compile(r"^import[ \t]+([^\n]+)", re.M)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


# what another library's C module imports as it starts, not to be read in its source: imported as steps of
# their own before it (msgspec's _core: ~6 of its ~8 ms were these); one not installed is left out
HINTS: dict[str, tuple[str, ...]] = {"msgspec": ("datetime", "decimal", "uuid", "typing_extensions")}


def _source_path(name: str) -> str | None:
    """A ``rillet`` module's source file (found without importing anything), else None."""
    if name != "rillet" and not name.startswith("rillet."):
        return None
    base = os.path.join(_ROOT, *name.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None


def _is_module(name: str) -> bool:
    return _source_path(name) is not None


def imports_of(name: str) -> list[str]:
    """The modules ``name``'s source imports at its top level, in order (its parent packages first)."""
    parts = name.split(".")
    out = [".".join(parts[:i]) for i in range(1, len(parts))]
    path = _source_path(name)
    if path is None:
        return out + [h for h in HINTS.get(name, ()) if h in sys.modules or importlib.util.find_spec(h) is not None]
    with open(path, encoding="utf-8") as f:
        src = f.read()
    is_pkg = path.endswith("__init__.py")
    found: list[tuple[int, list[str]]] = []
    for m in _FROM.finditer(src):
        mod = m.group(1)
        if mod.startswith("."):  # relative: against this module's package
            level = len(mod) - len(mod.lstrip("."))
            pkg = parts if is_pkg else parts[:-1]
            pkg = pkg[:len(pkg) - (level - 1)] if level > 1 else pkg
            rest = mod.lstrip(".")
            mod = ".".join([*pkg, rest] if rest else pkg)
        deps = [mod]
        for item in re.sub(r"#[^\n]*", "", m.group(2)).strip("() \t").split(","):
            sub = item.split(" as ")[0].strip()
            if sub and sub != "*" and _is_module(f"{mod}.{sub}"):
                deps.append(f"{mod}.{sub}")
        found.append((m.start(), deps))
    for m in _IMPORT.finditer(src):
        found.append((m.start(), [item.split(" as ")[0].strip() for item in re.sub(r"#.*", "", m.group(1)).split(",")
                                  if item.strip()]))
    found.sort(key=lambda t: t[0])
    for _, deps in found:
        out.extend(d for d in deps if d and d != "__future__")
    return out


def order(roots: list[str]) -> Iterator[str]:
    """The modules to import for ``roots`` not imported yet, each after what it imports (depth first).

    A module in an import cycle with one still being visited (``filestore`` imports ``_snapshot`` at its end,
    which imports ``filestore`` at its top) is no step of its own: the module that starts the cycle imports it,
    as a plain import would (``_snapshot`` imported first found ``filestore`` half made)."""
    seen: set[str] = set()
    stack: set[str] = set()
    inside: dict[str, set[str]] = {}  # a module left to a cycle's start -> the modules it waits for

    def visit(name: str) -> Iterator[str]:
        seen.add(name)
        stack.add(name)
        waits: set[str] = set()
        for dep in imports_of(name):
            if dep in stack:
                waits.add(dep)
            elif dep in inside:
                waits.update(m for m in inside[dep] if m in stack)
            elif dep not in seen and dep not in sys.modules:
                waits.update((yield from visit(dep)))
        stack.discard(name)
        waits.discard(name)
        if waits:
            inside[name] = waits
            return waits
        yield name
        return waits

    for r in roots:
        if r not in seen and r not in sys.modules:
            yield from visit(r)


class StagedImport:
    """Imports ``roots`` (and what they import) ``BUDGET`` seconds per loop pass, then calls ``done()``.

    A module that fails to import ends the staging early (``done`` is called all the same): the caller's
    own import of the roots repeats the failure where it is reported (``JSAccount.router``)."""

    def __init__(self, loop: Any, roots: list[str], done: Callable[[], None]) -> None:
        self.loop = loop
        self.done = done
        self._steps = order(list(roots))
        self.imported: list[str] = []
        self.finished = False
        loop.call_soon(self._pass)

    def _pass(self) -> None:
        start = time.monotonic()
        try:
            while True:
                name = next(self._steps)
                importlib.import_module(name)
                self.imported.append(name)
                if time.monotonic() - start >= BUDGET:
                    break
        except StopIteration:
            self._finish()
        except Exception:
            # (not swallowed: the roots are imported again by the caller, which reports the failure)
            self._finish()
        else:
            self.loop.call_soon(self._pass)

    def _finish(self) -> None:
        self.finished = True
        self.done()
