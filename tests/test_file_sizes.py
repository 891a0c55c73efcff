"""Issue 21: no source file of the package over 1,000 lines (the Python modules and the compiled lane's .pyx)."""
from __future__ import annotations

from pathlib import Path

LIMIT = 1000


def test_no_source_file_over_the_limit() -> None:
    root = Path(__file__).resolve().parent.parent / "rillet"
    big = sorted((sum(1 for _ in p.open(encoding="utf-8")), str(p.relative_to(root.parent)))
                 for p in list(root.rglob("*.py")) + list(root.rglob("*.pyx")))
    over = [(n, f) for n, f in big if n > LIMIT]
    assert not over, f"over {LIMIT} lines (split by concern): {over}"
    assert big and big[-1][0] > 500  # (the walk found the package)
