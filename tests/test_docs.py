"""The docs cannot drift from the code: every fenced block of docs/*.md and README.md is run.

* ```sh blocks run under ``bash -e -o pipefail`` in a fresh directory; ```python blocks as scripts there;
  ```conf blocks are written to a file and checked with ``rillet-server -t -c FILE``. ```text blocks are
  listings or output, not code (counted, not run). Any other language fails the test.
* An HTML comment on the line before a block says how it runs (``<!-- docs-test: WORDS -->``):
  ``server=plain|js|cluster`` starts a Rillet server (a one-server JetStream server, or a three-server
  JetStream cluster) on free ports for the block: ``nats://127.0.0.1:4222`` and ``NATS_URL`` become its
  address, ``127.0.0.1:8222`` / ``-m 8222`` its monitoring port; ``name=N`` shares that server with later
  blocks of the page naming N (they run in page order). ``no-server`` (the default) runs the block alone;
  its well-known ports (4221-4224, 6221-6224, 7222, 7422, 8221-8224, 1883, 8080) are mapped to free ones.
  ``background`` runs a command that serves until stopped: the test waits for its ports, then stops it.
  ``pytest`` runs a python block as a test file. ``same-as=docs/PAGE.md`` checks that a block of that page
  has the same text (and runs there), so one example can be shown twice and run once. ``fails`` expects a
  non-zero exit (a refusal shown in the docs). ``skip REASON`` would not run the block: none may.
* Long commands run too, shortened: ``quick(OLD => NEW; OLD2 => NEW2)`` replaces each OLD (which must be in
  the block) by NEW before the run, so the page shows the real command and the test runs a short form of
  it (a benchmark with ``--repeat 1`` and tiny sizes, a fault harness with 3 s of faults, the nats.py
  conformance suite on one file). The whole test suite (getting-started.md) runs collection-only (``--co``):
  it is this suite. ``checkout`` runs the block in the repository's root (``python -m benchmarks...``,
  ``scripts/...``, ``../shared/...``) with every ``/tmp/`` path of the block moved into the test's own
  directory (the wheel, venv and lock files of the block, not the machine's). ``server=regions`` is three
  one-server JetStream clusters ``west``, ``central``, ``east`` joined by gateways. ``needs=PATH,...`` skips
  the block, saying so, when a PATH (relative to the repository) is absent (the nats.py conformance kit).
  ``spark`` blocks need Java and a SparkSession: tests/spark/test_spark_docs.py runs them in the Spark
  tests' session (a python block with ``spark`` bound to it; ``in-session``: a ``python SCRIPT`` or
  ``python -m MODULE`` line run as a script in that process rather than starting a JVM of its own).
  ``run-by=FILE`` says that test FILE runs the block's command with the same arguments (checked here), so a
  2-3 minute run is not made twice. What this adds to the suite: about 2.5 minutes here (conformance,
  fault harness and benchmark blocks) and 40 s in the Spark tests, on two shared cores.
* A leading ``pip install -e .`` / ``pip install -e '.[extra]'`` is checked (the extra exists in
  pyproject.toml) and not re-run: the package is installed editable where the tests run.
Also: README.md is at most 200 lines, and docs/configuration.md is what scripts/gen_config_docs.py writes.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
MARK = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
QUICK = re.compile(r"\bquick\(([^()]*)\)")
RUNNABLE = {"sh", "python", "conf"}
MAX_SKIPPED = 0
WELL_KNOWN_PORTS = ([4221, 4222, 4223, 4224, 6221, 6222, 6223, 6224, 7222, 7422, 8221, 8222, 8223, 8224,
                     1883, 8080])


@dataclass
class Block:
    page: str
    line: int
    lang: str
    text: str
    words: list[str] = field(default_factory=list)
    quick: list[tuple[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"

    def opt(self, key: str) -> str | None:
        for w in self.words:
            if w.startswith(key + "="):
                return w.split("=", 1)[1]
        return None


def blocks_of(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        prev = start - 1
        while prev >= 0 and not lines[prev].strip():
            prev -= 1
        mark = MARK.search(lines[prev]) if prev >= 0 else None
        spec = mark.group(1) if mark else ""
        # quick(OLD => NEW; ...), then words, then an optional "(comment)"
        quick: list[tuple[str, str]] = []
        q = QUICK.search(spec)
        if q:
            spec = spec[:q.start()] + spec[q.end():]
            for pair in q.group(1).split(";"):
                old, sep, new = pair.partition("=>")
                assert sep and old.strip(), f"{path.name}:{prev + 1}: quick() wants OLD => NEW pairs: {pair!r}"
                quick.append((old.strip(), new.strip()))
        words = spec.split("(", 1)[0].split()
        if words[:1] == ["skip"] and "(" in spec:
            words.append(spec.split("(", 1)[1].rstrip(")"))
        out.append(Block(str(path.relative_to(ROOT)), start + 1, lang, "\n".join(lines[start + 1:j]) + "\n",
                         words, quick))
        i = j + 1
    return out


ALL = [b for p in PAGES for b in blocks_of(p)]
RUN = [b for b in ALL if b.lang != "text" and (not b.words or b.words[0] != "skip")]
SPARK_TESTS = ROOT / "tests" / "spark" / "test_spark_docs.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def strip_pip(text: str) -> str:
    """Check and drop a leading `pip install -e .[extra] &&` (the package is already installed)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def check(m: re.Match) -> str:
        extra = m.group(1)
        assert extra is None or extra in extras, f"pip install names extra {extra!r}, not in pyproject.toml"
        return ""
    return re.sub(r"pip install (?:-e )?'?\.(?:\[(\w+)\])?'? && ", check, text)


_installed: list[bool] = []


def installed_without_pythonpath() -> bool:
    """Whether the installed rillet imports outside the checkout with no PYTHONPATH (asked once)."""
    if not _installed:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run([sys.executable, "-c", "import rillet.app.main"], cwd="/", env=env, capture_output=True)
        _installed.append(r.returncode == 0)
    return _installed[0]


def shorten(block: Block) -> str:
    """The block's text with its quick() replacements made (each must match, so the marker cannot rot)."""
    text = block.text
    for old, new in block.quick:
        assert old in text, f"{block.id}: quick() replaces {old!r}, which is not in the block"
        text = text.replace(old, new)
    return text


def runs_command(block: Block, path: Path) -> None:
    """Check that the test file ``path`` runs each command of the block: its script and every argument."""
    src = path.read_text()
    for line in block.text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        script = next((w for w in words if w.endswith(".py")), None)
        assert script, f"{block.id}: no script in {line!r}"
        assert Path(script).name in src, f"{block.id}: {path.name} does not run {script}"
        for arg in words[words.index(script) + 1:]:
            assert f'"{arg}"' in src, f"{block.id}: {path.name} does not pass {arg} to {script}"


# ---- servers for the blocks that need one (kept per page and name, stopped at the end) -------------------

_servers: dict[tuple[str, str], object] = {}


def server_for(block: Block, tmp: Path):
    from rillet.testing import Servers
    kind = block.opt("server")
    key = (block.page, block.opt("name") or f"{kind}@{block.line}")
    if key not in _servers:
        if kind == "plain":
            s = Servers.single(http_port=-1)
        elif kind == "js":
            s = Servers.single(jetstream=True, http_port=-1, store_dir=str(tmp / "store"))
        elif kind == "cluster":
            s = Servers.cluster(3, store_dir=str(tmp / "store"))
        elif kind == "regions":
            s = Servers.super_cluster(3, 1, jetstream=True, names=["west", "central", "east"],
                                      store_dir=str(tmp / "store"))
        else:
            raise AssertionError(f"{block.id}: unknown server={kind}")
        _servers[key] = s.start()
    return _servers[key]


@pytest.fixture(scope="module", autouse=True)
def _stop_servers():
    yield
    for s in _servers.values():
        s.stop()
    _servers.clear()


def substitute(block: Block, tmp: Path) -> tuple[str, dict[str, str], list[int]]:
    """The block's text with its addresses made real, its environment, and the ports to wait for."""
    text = strip_pip(shorten(block))
    if "checkout" in block.words:
        text = text.replace("/tmp/", f"{tmp}/")
    # the CLI's contexts and the nsc store of `rillet auth` in the block's directory, not the user's
    env = dict(os.environ, PYTHONUNBUFFERED="1", RILLET_CONFIG_DIR=str(tmp / "cfg"), NSC_HOME=str(tmp / "nsc"),
               XDG_CONFIG_HOME=str(tmp / "xdg-config"), XDG_DATA_HOME=str(tmp / "xdg-data"),
               NKEYS_PATH=str(tmp / "nkeys"))
    env.pop("NATS_URL", None)
    env.pop("NATS_CONTEXT", None)
    if "PYTHONPATH" in env and installed_without_pythonpath():
        # a reader's shell: no PYTHONPATH (the Spark tests put the checkout on it, where its rillet.egg-info
        # would make pip take a wheel for installed already, and a venv's server import the checkout)
        del env["PYTHONPATH"]
    waits: list[int] = []
    if block.opt("server"):
        s = server_for(block, tmp)
        url = s.url
        text = text.replace("nats://127.0.0.1:4222", url).replace("nats://localhost:4222", url)
        try:
            mon = s.monitor_url()
        except RuntimeError:
            mon = None
        if mon:
            port = mon.rsplit(":", 1)[1]
            text = text.replace("127.0.0.1:8222", f"127.0.0.1:{port}").replace("localhost:8222", f"127.0.0.1:{port}")
            text = re.sub(r"-m 8222\b", f"-m {port}", text)
        env["NATS_URL"] = ",".join(s.urls)
    else:
        mapping = {}
        for p in WELL_KNOWN_PORTS:
            if re.search(rf"(?<![\d.]){p}(?!\d)", text):
                mapping[p] = free_port()
        for p, q in mapping.items():
            text = re.sub(rf"(?<![\d.]){p}(?!\d)", str(q), text)
        waits = [mapping[p] for p in mapping if p in (4221, 4222, 8222)]
    return text, env, waits


def run_shell(text: str, env: dict[str, str], cwd: Path, timeout: float,
              out_dir: Path | None = None) -> subprocess.CompletedProcess:
    # output to a file, not a pipe: servers a block starts with & keep a pipe open after bash ends
    with open((out_dir or cwd) / ".block.out", "w+") as out:
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            out.seek(0)
            raise AssertionError(f"timed out after {timeout} s:\n{out.read()}")
        finally:
            stop_group(proc.pid)
            proc.wait()
        out.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), "")


def stop_group(pgid: int) -> None:
    """Stop what a block left running in the background (its servers), SIGTERM then SIGKILL."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(50):
        time.sleep(0.1)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait_listening(port: int, deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def run_background(text: str, env: dict[str, str], cwd: Path, waits: list[int]) -> None:
    assert waits, "a background block must name a port to wait for"
    log = open(cwd / "background.log", "w+")
    proc = subprocess.Popen(["bash", "-e", "-c", text], cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        for port in waits:
            ok = wait_listening(port, deadline)
            log.seek(0)
            assert ok, f"nothing listens on {port} after 30 s:\n{log.read()}"
        assert proc.poll() is None, f"the command ended:\n{log.read()}"
    finally:
        stop_group(proc.pid)
        proc.wait(timeout=10)
        log.close()


def plugin_arg() -> str:
    """`-p rillet.testing.pytest_plugin` where the editable install predates the pytest11 entry point."""
    from importlib.metadata import distributions
    # every distribution, as pytest loads them (entry_points() keeps one per name: a stale rillet.egg-info in the
    # checkout would hide the installed package's entry point, and -p would then register the plugin twice)
    eps = [ep for d in distributions() for ep in d.entry_points if ep.group == "pytest11"]
    return "" if any(ep.value == "rillet.testing.pytest_plugin" for ep in eps) else "-p rillet.testing.pytest_plugin"


def texts_of(page: str) -> set[str]:
    """The blocks of a page that stand on their own (run there, or skipped there with their reason)."""
    return {b.text for b in ALL if b.page == page and not b.opt("same-as")}


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_block(block: Block, tmp_path: Path):
    assert block.lang in RUNNABLE, f"{block.id}: ```{block.lang} blocks cannot be run (sh, python, conf, text)"
    if block.opt("same-as"):
        # the same commands as a block another page runs (e.g. the README's cluster and docs/clustering.md's)
        page = block.opt("same-as")
        assert block.text in texts_of(page), f"{block.id}: no block of {page} has the same text"
        return
    if block.opt("run-by"):
        # a long run that another test makes already, with the same arguments: not made twice
        runs_command(block, ROOT / block.opt("run-by"))
        return
    if "spark" in block.words:
        # needs Java and a SparkSession: run by tests/spark/test_spark_docs.py, in the Spark tests' session
        assert SPARK_TESTS.exists() and block.page in SPARK_TESTS.read_text(), f"{block.id}: not run by {SPARK_TESTS}"
        return
    missing = [p for p in (block.opt("needs") or "").split(",") if p and not (ROOT / p).exists()]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (not on this machine)")
    # the shortened runs (benchmarks, fault harnesses, the conformance subset) take up to a minute or two
    run_block(block, tmp_path, timeout=300 if block.quick or "checkout" in block.words else 90)


def run_block(block: Block, tmp_path: Path, timeout: float = 90) -> subprocess.CompletedProcess | None:
    text, env, waits = substitute(block, tmp_path)
    cwd = ROOT if "checkout" in block.words else tmp_path
    expect_fail = "fails" in block.words
    if block.lang == "conf":
        conf = tmp_path / "server.conf"
        conf.write_text(text)
        r = subprocess.run([sys.executable, "-m", "rillet.app.main", "-t", "-c", str(conf)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=60)
        r = subprocess.CompletedProcess(r.args, r.returncode, r.stdout + r.stderr, "")
    elif block.lang == "sh" and "background" in block.words:
        run_background(text, env, cwd, waits)
        return None
    elif block.lang == "sh":
        r = run_shell(text, env, cwd, timeout=timeout, out_dir=tmp_path)
    elif "pytest" in block.words:
        (tmp_path / "test_snippet.py").write_text(text)
        r = run_shell(f"{sys.executable} -m pytest -q -p no:cacheprovider {plugin_arg()} test_snippet.py", env,
                      tmp_path, timeout)
    else:
        (tmp_path / "snippet.py").write_text(text)
        r = run_shell(f"{sys.executable} {tmp_path / 'snippet.py'}", env, cwd, timeout=timeout, out_dir=tmp_path)
    if expect_fail:
        assert r.returncode != 0, f"{block.id} should fail:\n{r.stdout}"
    else:
        assert r.returncode == 0, f"{block.id} exited {r.returncode}:\n{text}\n---\n{r.stdout}"
    return r


def test_no_block_is_skipped():
    """Every block runs: long ones shortened (quick), Spark's in the Spark tests, the suite itself collected."""
    skipped = [b for b in ALL if b.words and b.words[0] == "skip"]
    assert len(skipped) <= MAX_SKIPPED, [b.id for b in skipped]
    ran = [b for b in RUN if not b.opt("same-as")]
    assert len(ran) >= 20, f"only {len(ran)} blocks run"
    print(f"{len(ALL)} blocks: {len(ran)} run ({sum(bool(b.quick) for b in ran)} shortened, "
          f"{sum('spark' in b.words for b in ran)} in the Spark tests, {sum(bool(b.opt('run-by')) for b in ran)} by "
          f"another test), {len(RUN) - len(ran)} shown twice (same-as), {sum(b.lang == 'text' for b in ALL)} text listings")


def test_markers_are_known():
    known = {"skip", "background", "pytest", "fails", "no-server", "checkout", "spark", "in-session"}
    for b in ALL:
        if b.words and b.words[0] != "skip":
            for w in b.words:
                assert w.split("=")[0] in known | {"server", "name", "same-as", "run-by", "needs"}, f"{b.id}: {w}"


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines (at most 200: the rest belongs in docs/)"


def test_configuration_page_is_generated_from_the_code():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_every_page_is_in_the_site():
    nav = (ROOT / "mkdocs.yml").read_text()
    for p in (ROOT / "docs").glob("*.md"):
        assert p.name in nav, f"docs/{p.name} is not in mkdocs.yml's nav"


def test_no_indented_code_blocks():
    """Code shown by indentation would escape the run above: fenced blocks only."""
    for path in PAGES:
        lines, fenced = path.read_text().split("\n"), False
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fenced = not fenced
            elif (not fenced and line.startswith("    ") and i and not lines[i - 1].strip()
                  and not re.match(r"\s*([-*|]|\d+\.)", line)):
                raise AssertionError(f"{path.name}:{i + 1}: an indented code block; fence it (```sh ...)")
