"""Suite-wide settings.

Hypothesis draws its examples from a fixed seed by default here (``derandomize``), so that a run of the suite —
in CI or on a newcomer's machine — is repeatable: a failure seen once is seen again. A random hunt is one
environment variable away: ``HYPOTHESIS_PROFILE=random`` (and ``RILLET_FUZZ_SCALE=N`` for N times the examples
in tests/test_js_hostile_fuzz.py). A difference a random hunt finds goes back in as an ``@example``.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("random")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
