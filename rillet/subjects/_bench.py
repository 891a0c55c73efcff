"""Micro-benchmark for the sublist hot path.

    python -m rillet.subjects._bench

1000 subscriptions (literal, ``*`` and ``>`` patterns, some queue groups);
times ``match`` on a cache hit, on a miss (cache disabled, so every call
walks the trie), ``has_interest`` and an insert/remove pair.
"""

from __future__ import annotations

import timeit

from rillet.subjects import Sublist


class _Sub:
    __slots__ = ("subject", "queue")

    def __init__(self, subject: str, queue: str | None = None) -> None:
        self.subject = subject
        self.queue = queue


def _populate(sl: Sublist) -> None:
    n = 0
    for i in range(100):
        for j in range(7):
            sl.insert(_Sub("orders.region%d.item%d" % (i, j)))
            n += 1
        sl.insert(_Sub("orders.region%d.*" % i))
        sl.insert(_Sub("orders.region%d.>" % i, "workers"))
        sl.insert(_Sub("*.region%d.item0" % i))
        n += 3
    assert n == 1000, n


def _per_call(stmt: str, ns: dict[str, object], number: int) -> float:
    best = min(timeit.repeat(stmt, globals=ns, number=number, repeat=5))
    return best / number * 1e9


def main() -> None:
    cached = Sublist()
    _populate(cached)
    uncached = Sublist(cache=False)
    _populate(uncached)
    subj = "orders.region42.item3"
    r = cached.match(subj)
    print("subscriptions: %d; match(%r): %d psubs, %d queue groups"
          % (cached.count(), subj, len(r.psubs), len(r.qsubs)))
    ns: dict[str, object] = {
        "cached": cached,
        "uncached": uncached,
        "subj": subj,
        "nosubj": "nobody.listens.here",
        "_Sub": _Sub,
        "Sublist": Sublist,
    }
    rows = [
        ("match, cache hit", "cached.match(subj)", 1_000_000),
        ("match, miss (cache off), 2 psubs + 1 qgroup", "uncached.match(subj)", 100_000),
        ("match, miss (cache off), no interest", "uncached.match(nosubj)", 200_000),
        ("has_interest, cache hit", "cached.has_interest(subj)", 1_000_000),
        ("has_interest, no cache", "uncached.has_interest(subj)", 200_000),
        ("insert+remove literal (cache populated)",
         "s = _Sub('orders.region7.itemX'); cached.insert(s); cached.remove(s)", 50_000),
    ]
    for name, stmt, number in rows:
        print("%-48s %8.0f ns/call" % (name, _per_call(stmt, ns, number)))

    # Cache misses on a cached sublist: fresh subjects every call (this
    # includes filling the cache and the periodic sweep).
    subjects = ["orders.region%d.item%d" % (i % 100, i) for i in range(200_000)]
    it = iter(subjects)
    ns["it"] = it
    t = timeit.timeit("cached.match(next(it))", globals=ns, number=len(subjects))
    print("%-48s %8.0f ns/call" % ("match, miss + cache store (+sweeps)", t / len(subjects) * 1e9))

    # Wildcard insert/remove scans the cache to keep it exact.
    for i in range(1024):
        cached.match("orders.region%d.item%d" % (i % 100, i))
    print("%-48s %8.0f ns/call" % (
        "insert+remove wildcard (1024 cached entries)",
        _per_call("s = _Sub('orders.region7.*'); cached.insert(s); cached.remove(s)", ns, 2_000),
    ))


if __name__ == "__main__":
    main()
