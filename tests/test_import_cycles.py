"""The package layering stays acyclic, lazy imports included, and the server imports none of its subsystems.

The module import graph is built with ``ast`` from the source (no module is imported). Two views:

* **import-time edges**: the imports a module runs when it is loaded: module-level statements, including
  those inside module-level ``if``/``try`` blocks and class bodies, but not inside functions (a
  function-level "lazy" import runs only when called, so it cannot make an import-time cycle) and not under
  ``if TYPE_CHECKING:``. Importing ``a.b.c`` also loads the packages ``a`` and ``a.b``, so those count too
  (except a module's own parent packages, which are always loaded first).
* **all edges**: every import anywhere in the module, lazy and ``TYPE_CHECKING`` ones included.

Rules:

1. No cycle between packages (``rillet.config``, ``rillet.server``, ``rillet.monitor``, ``rillet.jetstream``,
   ``rillet.subjects``, ``rillet.protocol``, ``rillet.spark``, ``rillet.cli``, ... and the top-level modules such
   as ``rillet.jwt``), in either view: an import inside a function is fine when it reaches a lower layer (to
   load it only when needed), never a higher one. The layering this keeps: gocompat and the top-level modules at
   the bottom; config (the configuration language and ``Options``) below server; server below cluster, monitor
   and jetstream; the application layer (``rillet.app``, the composition root) above them all, passing the
   server what it needs (rillet/server/subsystems.py). ``rillet.lane`` decides the lane and knows no package
   above it: each package registers its own compiled twins with it.
2. ``rillet.config`` imports nothing from ``rillet.server``, ``rillet.monitor`` or ``rillet.jetstream``, lazily
   or not: what the config checks need lives in ``rillet.config`` (or a top-level module such as
   ``rillet.jwt``), and the server uses it from there.
3. ``rillet.server`` imports nothing of ``rillet.jetstream``, ``rillet.cluster``, ``rillet.monitor`` or
   ``rillet.app`` (any view): the composition root makes JetStream (``Subsystems.new_jetstream``) and the server
   uses the object it gets.
4. The top-level modules (``rillet.nkey``, ``rillet.jwt``...) and the Go-compatibility package
   (``rillet.gocompat``) import no subpackage, lazily or not: every package may use them, so they are the bottom
   layer (``rillet.jwt`` decodes nkeys with ``rillet.nkey``, not by calling back into ``rillet.server``).
5. An import inside a function reaches what its module does not otherwise load (to save memory and start
   time): a module of another package that importing the module loads anyway is imported at the top.

Run as a script (``python tests/test_import_cycles.py``) to print the package graph and any cycles.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG_DIR = ROOT / "rillet"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# (``__main__`` modules are scripts, run by ``python -m``, never imported: no module depends on them, so
# they cannot be part of a cycle; ``rillet.server.__main__`` starts the command line of ``rillet.app``)
MODULES = {_module_name(p): p for p in PKG_DIR.rglob("*.py") if p.name != "__main__.py"}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module, import_time: bool) -> list[ast.Import | ast.ImportFrom]:
    if not import_time:
        return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                found.append(n)
                continue
            if isinstance(n, ast.If) and _is_type_checking(n.test):
                visit(n.orelse)
                continue
            for field in ("body", "orelse", "finalbody"):
                visit(getattr(n, field, None) or [])
            for h in getattr(n, "handlers", None) or []:
                visit(h.body)

    visit(tree.body)
    return found


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The rillet modules an import statement loads (with their packages)."""
    names: set[str] = set()
    if isinstance(node, ast.Import):
        names.update(a.name for a in node.names)
    else:
        if node.level:
            base = module.split(".")
            if MODULES[module].name != "__init__.py":
                base = base[:-1]
            base = base[:len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names.add(target)
        names.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES)
    out: set[str] = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m in MODULES and m != module and not module.startswith(m + "."):
                out.add(m)
    return out


def import_graph(import_time: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node in _import_nodes(tree, import_time):
            edges |= _targets(module, node)
        graph[module] = edges
    return graph


def package_of(module: str) -> str:
    """``rillet.<first component>``: a subpackage, or a top-level module such as ``rillet.gocompat.gotime``."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """{(package, package): [(module, module) edges that make it]}; ``rillet`` itself (version constants) is
    left out: every package may read it."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for a, targets in graph.items():
        for b in targets:
            pa, pb = package_of(a), package_of(b)
            if pa != pb and "rillet" not in (pa, pb):
                out.setdefault((pa, pb), []).append((a, b))
    return out


def strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's algorithm: the components with more than one node."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    for a, b in edges:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return comps


def package_cycles(import_time: bool = True) -> list[str]:
    pg = package_graph(import_graph(import_time))
    nodes = {p for pair in pg for p in pair}
    report = []
    for comp in strongly_connected(nodes, set(pg)):
        lines = [" <-> ".join(comp)]
        for (a, b), why in sorted(pg.items()):
            if a in comp and b in comp:
                lines.append(f"  {a} -> {b}: " + ", ".join(f"{m} imports {t}" for m, t in sorted(why)[:6]))
        report.append("\n".join(lines))
    return report


# ---------------------------------------------------------------------------------------------------


def test_graph_sees_the_packages() -> None:
    # the checks below mean something only if the graph finds the modules and their imports
    g = import_graph(import_time=True)
    for m in ("rillet.config.options", "rillet.server.server", "rillet.monitor.varz", "rillet.jetstream.manager",
              "rillet.gocompat.gotime", "rillet.app.compose"):
        assert m in g
    assert "rillet.config.options" in g["rillet.server.server"]
    # lazy imports are in the second view only
    assert "rillet.jetstream.manager" not in g["rillet.app.compose"]
    assert "rillet.jetstream.manager" in import_graph(import_time=False)["rillet.app.compose"]


def test_cycle_detection_finds_a_cycle() -> None:
    assert strongly_connected({"a", "b", "c"}, {("a", "b"), ("b", "a"), ("b", "c")}) == [["a", "b"]]
    assert strongly_connected({"a", "b"}, {("a", "b")}) == []


def test_no_import_time_cycle_between_packages() -> None:
    cycles = package_cycles(import_time=True)
    assert not cycles, ("import-time cycle between packages (move the shared code down a layer, or import it "
                        "inside the function that needs it):\n" + "\n".join(cycles))


def test_no_cycle_between_packages_counting_lazy_imports() -> None:
    """Issue 21: the packages stay layered even counting imports inside functions (a function-level import of
    a lower layer, to load it only when needed, is fine; one of a higher layer is a hidden cycle)."""
    cycles = package_cycles(import_time=False)
    assert not cycles, ("cycle between packages counting function-level imports (move the code the lower layer "
                        "needs down into it, or let the composition root pass it in):\n" + "\n".join(cycles))


# function-level imports of another package's modules that the module loads anyway when it is imported (the
# import gains nothing: it belongs at the top) that are known and accepted: none now
KNOWN_AVOIDABLE: set[tuple[str, str]] = set()


def avoidable_function_imports() -> set[tuple[str, str]]:
    """(module, target): ``module`` imports ``target`` (a module of another package, not a package) inside a
    function although importing ``module`` already loads ``target``."""
    lazy, eager = import_graph(import_time=False), import_graph(import_time=True)

    def loaded_with(m: str) -> set[str]:
        seen: set[str] = set()
        todo = [m]
        while todo:
            for t in eager.get(todo.pop(), ()):
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen

    out = set()
    for m, targets in lazy.items():
        late = {t for t in targets - eager[m] if package_of(t) != package_of(m) and "rillet" not in
                (package_of(t), package_of(m)) and MODULES[t].name != "__init__.py"}
        if late:
            out |= {(m, t) for t in late & loaded_with(m)}
    return out


def test_no_avoidable_function_level_imports_across_packages() -> None:
    """Issue 21: an import inside a function is for what the module does not otherwise load (memory and start
    time, issue 20); one of a module that importing this module loads anyway goes at the top."""
    found = avoidable_function_imports()
    new = sorted(found - KNOWN_AVOIDABLE)
    assert not new, f"function-level imports of modules these modules load anyway (import them at the top): {new}"


def test_config_does_not_import_the_server_monitor_or_jetstream() -> None:
    g = import_graph(import_time=False)
    bad = sorted((m, t) for m, ts in g.items() if package_of(m) == "rillet.config"
                 for t in ts if package_of(t) in ("rillet.server", "rillet.monitor", "rillet.jetstream"))
    assert not bad, ("rillet.config imports runtime modules (put what the config checks need in rillet.config "
                     f"and let the server import it from there): {bad}")


def test_server_does_not_import_jetstream() -> None:
    g = import_graph(import_time=False)
    bad = sorted((m, t) for m, ts in g.items() if package_of(m) == "rillet.server"
                 for t in ts if package_of(t) == "rillet.jetstream")
    assert not bad, ("rillet.server imports rillet.jetstream (the composition root makes JetStream, "
                     f"Subsystems.new_jetstream; the server uses server.jetstream): {bad}")


def test_top_level_modules_are_the_bottom_layer() -> None:
    g = import_graph(import_time=False)
    top = [m for m in g if m.count(".") == 1 and not (PKG_DIR / m.split(".")[1]).is_dir()]
    # the Go-compatibility package is part of the bottom layer: it imports nothing else of Rillet
    top += [m for m in g if package_of(m) == "rillet.gocompat"]
    assert "rillet.jwt" in top and "rillet.gocompat.gojson" in top and "rillet.gocompat.jsoncodec" in top
    bad = sorted((m, t) for m in top for t in g[m] if t not in top)
    assert not bad, f"top-level modules import subpackages (move what they need down to a top-level module): {bad}"


# the delivery path itself knows links only through rillet.server.delivery's Link protocol
DELIVERY_PATH = ("rillet.server.delivery", "rillet.server.accounts", "rillet.server.msgtrace",
                 "rillet.server.client")
ROOT_MODULE = "rillet.app.compose"


def test_server_does_not_import_links_or_monitor() -> None:
    """rillet.server imports neither rillet.cluster nor rillet.monitor, lazily or not (nor the composition
    root that does): the root (rillet.app) builds the links and monitoring and wires them through
    rillet.server.subsystems; the delivery path knows links through the Link protocol."""
    g = import_graph(import_time=False)
    for m in DELIVERY_PATH + ("rillet.server.server", "rillet.server.sysacc", "rillet.server.websocket"):
        assert m in g
    bad = {m: sorted(t for t in ts if package_of(t) in ("rillet.cluster", "rillet.monitor", "rillet.app"))
           for m, ts in g.items() if package_of(m) == "rillet.server"}
    bad = {m: ts for m, ts in bad.items() if ts}
    assert not bad, f"rillet.server imports rillet.cluster / rillet.monitor / rillet.app: {bad}"


def test_the_composition_root_loads_subsystems_only_when_needed() -> None:
    """rillet.app.compose imports the links, monitoring and JetStream inside the functions that build them
    (a server whose options do not ask for one never loads it: tests/test_compose.py runs that), and only
    the application layer (and the ``rillet`` command, and ``rillet.testing``'s fixtures) imports the root."""
    eager = sorted(t for t in import_graph(import_time=True)[ROOT_MODULE]
                   if package_of(t) in ("rillet.cluster", "rillet.monitor", "rillet.jetstream"))
    assert not eager, f"{ROOT_MODULE} imports subsystems when loaded: {eager}"
    lazy = import_graph(import_time=False)[ROOT_MODULE]
    assert {"rillet.cluster.cluster", "rillet.monitor", "rillet.jetstream.manager"} <= lazy
    users = sorted(m for m, ts in import_graph(import_time=False).items()
                   if any(package_of(t) == "rillet.app" for t in ts)
                   and package_of(m) not in ("rillet.app", "rillet.cli", "rillet.testing"))
    assert not users, f"modules below the application layer import rillet.app: {users}"


if __name__ == "__main__":
    for view in (True, False):
        print("import-time edges" if view else "all edges (lazy and TYPE_CHECKING included)")
        for (a, b), why in sorted(package_graph(import_graph(view)).items()):
            print(f"  {a} -> {b} ({len(why)})")
        print("  cycles:", "\n".join(package_cycles(view)) or "none")
