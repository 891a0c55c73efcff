"""Store throughput: ``python -m rillet.jetstream.store._bench [N]``."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time

from .base import StoreConfig
from .filestore import FileStore
from .memstore import MemStore


def _rate(store, n: int, payload: bytes, subjects: list[str]) -> float:
    ns = len(subjects)
    t = time.perf_counter()
    for i in range(n):
        store.store_msg(subjects[i % ns], b"", payload)
    return n / (time.perf_counter() - t)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    one = ["orders.new"]
    many = [f"kv.key.{i}" for i in range(1000)]
    rows = []
    for label, kw, subjects in (
        ("1 subject", {}, one),
        ("1 subject, max_msgs=10000", {"max_msgs": 10_000}, one),
        ("1000 subjects, max_msgs_per_subject=1", {"max_msgs_per_subject": 1}, many),
    ):
        for size in (16, 1024):
            payload = b"x" * size
            mem = _rate(MemStore(StoreConfig(storage="memory", **kw)), n, payload, subjects)
            d = tempfile.mkdtemp(prefix="rillet-bench-")
            try:
                fs = FileStore(d, StoreConfig(**kw))
                fil = _rate(fs, n, payload, subjects)
                t = time.perf_counter()
                fs.sync()
                sync = time.perf_counter() - t
                fs.stop()
                t = time.perf_counter()
                FileStore(d, StoreConfig(**kw)).stop()
                reopen = time.perf_counter() - t
            finally:
                shutil.rmtree(d, ignore_errors=True)
            rows.append((label, size, mem, fil, sync, reopen))
    print(f"{'case':40} {'payload':>7} {'memory msg/s':>13} {'file msg/s':>11} {'fsync s':>8} {'reopen s':>9}")
    for label, size, mem, fil, sync, reopen in rows:
        print(f"{label:40} {size:>7} {mem:>13,.0f} {fil:>11,.0f} {sync:>8.3f} {reopen:>9.3f}")


if __name__ == "__main__":
    main()
