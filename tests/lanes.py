"""Both lanes for tests (rillet.lane): the pure-Python parsers and their compiled twins.

``LANES`` parametrizes a fixture; ``parser_class(lane, name)`` gives that lane's ``ClientParser``,
``ServerParser`` or ``wire``. The compiled lane is skipped (with the reason) where the extension was not
built; tests/test_lanes.py::test_compiled_lane_is_built fails then, unless RILLET_PURE is set.
"""
from __future__ import annotations

import pytest

from rillet import lane as _lane

try:
    _lane.compiled("ClientParser")
    _lane.compiled("ServerParser")
    COMPILED_ERROR = ""
except ImportError as e:
    COMPILED_ERROR = str(e)

LANES = [
    pytest.param("pure", id="pure"),
    pytest.param("compiled", id="compiled",
                 marks=pytest.mark.skipif(bool(COMPILED_ERROR), reason=f"compiled lane not built: {COMPILED_ERROR}")),
]


def parser_class(lane: str, name: str):
    return _lane.compiled(name) if lane == "compiled" else _lane.pure(name)
