#!/usr/bin/env python3
"""Spark Structured Streaming from an R3 stream on a 3-server cluster through faults (issue 24): the
``jetstream`` source into Parquet, the ``jetstream`` sink and the ``kv`` sink, exactly once, while stream
leaders step down, servers are SIGKILLed and the network is cut; then a batch write with task retries across
a leader kill. See tests/faults/spark_pipeline.py and tests/faults/README.md.

    flock /tmp/heavy.lock python scripts/spark_faults.py --quick --seed 5            # ~2-3 min
    flock /tmp/heavy.lock python scripts/spark_faults.py --server go --time 120 --seed 6

Exit 0: every check passed; 1: a check failed (the report says which); 2: the run itself broke.
"""
from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from faults.spark_pipeline import main  # noqa: E402


def _term(*_a) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _term)
    try:
        sys.exit(main())
    except Exception as e:  # the run broke (not a failed check): exit 2 with the reason
        print(f"RESULT: BROKEN - {type(e).__name__}: {e}", flush=True)
        sys.exit(2)
