"""What a normal (non-editable) install gets: every file under rillet/ is in the sdist and the wheel, and
every third-party module rillet imports is a declared dependency.

The sdist and wheels are built with setuptools' own PEP 517 hooks from a copy of the source tree (what
``pip install .`` and ``python -m build`` call, minus the isolated environment, so the test stays fast and
offline). ``scripts/smoke_wheel.sh`` (run by .ci/run) goes further: a wheel built by pip, installed in a
fresh virtual environment, serving JetStream.
"""
from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "rillet"


def _built_in_place(path: str) -> bool:
    """What `pip install -e .` builds beside the compiled lane's sources (not shipped: the sdist carries the
    .pyx files and setup.py builds them again)."""
    return path.endswith((".so", ".pyd")) or (path.startswith("rillet/_speedups/") and path.endswith((".c", ".html")))


def _shipped_files() -> set[str]:
    """Every file under rillet/ (paths relative to the project root), less byte-code caches and what a build
    made in place."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if name.endswith((".pyc", ".pyo")) or _built_in_place(Path(dirpath, name).relative_to(ROOT).as_posix()):
                continue
            out.add(Path(dirpath, name).relative_to(ROOT).as_posix())
    return out


def _start_hook(src: Path, hook: str, out: Path) -> tuple[subprocess.Popen, Path, str]:
    code = ("import sys\nfrom setuptools import build_meta\n"
            f"print(build_meta.{hook}(sys.argv[1]))\n")
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-c", code, str(out)], cwd=src, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    return p, out, hook


def _finish_hook(started: tuple[subprocess.Popen, Path, str]) -> Path:
    p, out, hook = started
    try:
        stdout, stderr = p.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        p.kill()
        stdout, stderr = p.communicate()
        raise AssertionError(f"{hook} did not end within 180 s:\n{stdout}\n{stderr}")
    assert p.returncode == 0, f"{hook} failed:\n{stdout}\n{stderr}"
    return out / stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("pkg")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    shutil.copytree(PKG, src / "rillet", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.so"))
    # the sdist, then two wheels at once (their compilations overlap on 2 cores; each has its own tree): one from
    # the tree (what `pip install .` does) and one from the unpacked sdist (what pip does with an sdist from a
    # registry)
    sdist = _finish_hook(_start_hook(src, "build_sdist", tmp / "sdist"))
    with tarfile.open(sdist) as tf:
        tf.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    jobs = [_start_hook(src, "build_wheel", tmp / "wheel"), _start_hook(unpacked, "build_wheel", tmp / "wheel2")]
    wheel, wheel_from_sdist = (_finish_hook(j) for j in jobs)
    return {"sdist": sdist, "wheel": wheel, "wheel_from_sdist": wheel_from_sdist}


def _sdist_names(path: Path) -> set[str]:
    with tarfile.open(path) as tf:
        # rillet-0.1.0/rillet/x.py -> rillet/x.py
        return {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile() and "/" in m.name}


def _wheel_names(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as zf:
        return set(zf.namelist())


def test_data_files_exist() -> None:
    # the catalog the server loads at start (rillet/jetstream/errors.py); if it moves, this test moves with it
    assert "rillet/jetstream/errors.json" in _shipped_files()


@pytest.mark.parametrize("kind", ["sdist", "wheel", "wheel_from_sdist"])
def test_every_file_under_rillet_ships(built: dict[str, Path], kind: str) -> None:
    names = _sdist_names(built[kind]) if kind == "sdist" else _wheel_names(built[kind])
    want = _shipped_files()
    missing = sorted(want - names)
    assert not missing, f"{built[kind].name} lacks {missing}"
    junk = sorted(n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo")))
    assert not junk, f"{built[kind].name} carries byte code: {junk}"


@pytest.mark.parametrize("kind", ["wheel", "wheel_from_sdist"])
def test_wheel_carries_the_compiled_lane(built: dict[str, Path], kind: str) -> None:
    """A C compiler and Cython are here (the test environment has them): the wheel has the extensions; the
    sdist has their sources, not what a build made of them."""
    names = _wheel_names(built[kind])
    for mod in ("_cparser", "_cserver", "_cstore", "_cjs", "_ccluster", "_cdeliver"):
        assert any(re.fullmatch(rf"rillet/_speedups/{mod}\.[^/]*\.so", n) for n in names), (mod, sorted(names)[:5])
    sdist = _sdist_names(built["sdist"])
    assert "setup.py" in sdist and "rillet/_speedups/_cparser.pyx" in sdist
    assert "rillet/_speedups/_ctext.pxd" in sdist  # (the helpers _cparser and _cserver cimport)
    assert not [n for n in sdist if _built_in_place(n)]


def test_wheel_entry_points_and_requirements(built: dict[str, Path]) -> None:
    with zipfile.ZipFile(built["wheel"]) as zf:
        info = next(n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt"))
        entry_points = zf.read(info).decode()
        meta = zf.read(info.replace("entry_points.txt", "METADATA")).decode()
    assert "rillet-server = rillet.app.main:main" in entry_points
    assert "rillet = rillet.cli.main:main" in entry_points
    requires = [line.split(":", 1)[1].strip() for line in meta.splitlines() if line.startswith("Requires-Dist:")]
    assert any(r.lower().startswith("pynacl") for r in requires), requires


# ---------------------------------------------------------------------------------------------------
# Declared dependencies


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _req_name(req: str) -> str:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
    assert m, req
    return _norm(m.group(1))


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module name -> the rillet files that import it (absolute imports outside the stdlib)."""
    found: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "rillet" and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(path.relative_to(ROOT).as_posix())
    return found


def test_every_import_is_a_declared_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_req_name(r) for r in project["dependencies"]}
    spark = {_req_name(r) for r in project["optional-dependencies"]["spark"]}
    dists = importlib.metadata.packages_distributions()
    problems = []
    for module, files in sorted(_third_party_imports().items()):
        providers = {_norm(d) for d in dists.get(module, [])}
        assert providers, f"{module} (imported by {sorted(files)}) is not installed: which package provides it?"
        # the Spark data source may rely on the `spark` extra; the pytest plugin on pytest, which loads it (the
        # pytest11 entry point); everything else on the core dependencies
        allowed = core | spark if all(f.startswith("rillet/spark/") for f in files) else core
        if module == "pytest" and all(f == "rillet/testing/pytest_plugin.py" for f in files):
            allowed = allowed | {"pytest"}
        # OCSP stapling may rely on the `ocsp` extra (a configuration that staples without it is refused at load,
        # naming the extra: tests/test_ocsp_staple.py)
        if all(f == "rillet/server/tls_openssl.py" for f in files):
            allowed = allowed | {_req_name(r) for r in project["optional-dependencies"]["ocsp"]}
        if not providers & allowed:
            problems.append(f"{module} (from {'/'.join(sorted(providers))}) imported by {sorted(files)}")
    assert not problems, "imported but not declared in pyproject.toml: " + "; ".join(problems)


def test_nats_py_pinned_below_next_minor() -> None:
    # rillet uses nats-py internals: the installed (tested) version must be inside the declared range
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [r for r in project["dependencies"] if _req_name(r) == "nats-py"]
    m = re.search(r"<\s*(\d+)\.(\d+)", req)
    assert m, f"nats-py has no upper bound: {req}"
    installed = tuple(int(x) for x in importlib.metadata.version("nats-py").split(".")[:2])
    assert installed < (int(m.group(1)), int(m.group(2))), (req, installed)
