"""mypy --strict over the typed seams ([tool.mypy] in pyproject.toml): the protocols of
rillet.jetstream.seams and every implementation assigned to them (tests/typing/check_seams.py), and the
modules listed there beside them that are strict-clean (a module added to the list stays clean)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_seams_type_check_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_missing_member_is_caught(tmp_path: Path) -> None:
    # the check can fail: an implementation missing a protocol member is a type error
    pytest.importorskip("mypy")
    bad = tmp_path / "bad_seam.py"
    bad.write_text("from rillet.jetstream.seams import RaftTransport\n\n"
                   "class Half:\n    peer = 'x'\n\n"
                   "def t(h: Half) -> RaftTransport:\n    return h\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                        "--cache-dir", str(tmp_path / "cache"), str(bad)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "RaftTransport" in r.stdout, r.stdout + r.stderr
