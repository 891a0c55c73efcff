#!/usr/bin/env python3
"""Jepsen-style fault runs against a 3-server clustered JetStream (Rillet or Go's nats-server).

    python scripts/js_faults.py --server go --quick              # each fault kind once, ~2 min
    python scripts/js_faults.py --server rillet --nemesis kill,partition --time 60 --seed 7

Workloads (queue of unique values through an R3 stream and a durable pull consumer; a KV compare-and-set
register checked for linearizability; streams and consumers created under faults), the nemesis (SIGKILL,
SIGSTOP, partitions in network namespaces) and the checks live in tests/faults/ (see its README.md).
Exit status 0: every check passed; 1: a check failed (the report says which); 2: the run itself broke.
Run it under the shared lock: flock /tmp/rillet-heavy.lock python scripts/js_faults.py ...
"""
from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from faults.runner import main  # noqa: E402


def _term(*_a) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _term)
    sys.exit(main())
