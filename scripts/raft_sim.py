#!/usr/bin/env python3
"""Run the deterministic RAFT simulator (rillet/raft/sim.py) over many seeds.

    python scripts/raft_sim.py --quick              # 2000 short seeds (what CI runs, well under 2 minutes)
    python scripts/raft_sim.py --seeds 20000        # long runs: longer fault phases, outside CI
    python scripts/raft_sim.py --seed 1234 [--quick] # one seed, with its fault log: reproduces a failure
    python scripts/raft_sim.py --quick --seeds 200 --mutation vote_any_log   # show the checker failing
    python scripts/raft_sim.py --quick --hs-loss     # with crashes that lose a node's hard state (term, vote)
    python scripts/raft_sim.py --power-all 500       # only: every node's power cut at once (lazy fsync):
                                                     # losses allowed, never silent (--quick runs 300 of these too),
                                                     # then a third as many "late" ones (a member that catches up
                                                     # through a snapshot must report the loss: --quick runs 100)

Exit status 1 when any seed violates a safety or liveness property (or, with --mutation, when none does).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import Pool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from rillet.raft.sim import MUTATIONS, run_power_all, run_seed  # noqa: E402

_OPTS: dict = {}


def _one(seed: int):
    v, sim = run_seed(seed, quick=_OPTS["quick"], mutations=_OPTS["mutations"], hs_loss=_OPTS["hs_loss"],
                      wipes=_OPTS["wipes"])
    return seed, v, sim.summary(), dict(sim.stats), sim.log if v else []


def _init(opts):
    _OPTS.update(opts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=None, help="number of seeds (default 2000 with --quick, 10000 otherwise)")
    ap.add_argument("--start", type=int, default=0, help="first seed")
    ap.add_argument("--seed", type=int, default=None, help="run one seed verbosely")
    ap.add_argument("--quick", action="store_true", help="short fault phases (CI)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--mutation", action="append", default=[], choices=sorted(MUTATIONS),
                    help="break the node or driver on purpose; the run then expects failures")
    ap.add_argument("--hs-loss", action="store_true",
                    help="faults include crashes that lose a node's hard state (rillet.raft.sim, hs_loss)")
    ap.add_argument("--wipes", action="store_true",
                    help="faults include any voter's disk lost, the node back as a wiped member (rillet.raft.sim, wipes)")
    ap.add_argument("--power-all", type=int, default=None, metavar="N",
                    help="run only N power-all runs (every node's power cut at once, lazy fsync)")
    a = ap.parse_args()
    if a.power_all is not None:
        return 1 if _power_all(a.power_all) + _power_all(a.power_all // 3, late=True) else 0
    opts = {"quick": a.quick, "mutations": frozenset(a.mutation), "hs_loss": a.hs_loss, "wipes": a.wipes}
    flags = (" --quick" if a.quick else "") + (" --hs-loss" if a.hs_loss else "") + (" --wipes" if a.wipes else "") + "".join(f" --mutation {m}" for m in a.mutation)
    if a.seed is not None:
        v, sim = run_seed(a.seed, quick=a.quick, mutations=opts["mutations"], hs_loss=a.hs_loss, wipes=a.wipes)
        for line in sim.log:
            print(line)
        print(sim.summary())
        print("stats:", dict(sim.stats))
        for x in v:
            print("VIOLATION:", x)
        print("FAIL" if v else "ok")
        return 1 if v else 0
    n = a.seeds if a.seeds is not None else (2000 if a.quick else 10000)
    seeds = range(a.start, a.start + n)
    t0 = time.monotonic()
    failed = []
    totals: dict = {}
    if a.jobs > 1:
        with Pool(a.jobs, initializer=_init, initargs=(opts,)) as pool:
            results = pool.imap_unordered(_one, seeds, chunksize=20)
            for r in results:
                _collect(r, failed, totals, flags)
    else:
        _init(opts)
        for s in seeds:
            _collect(_one(s), failed, totals, flags)
    dt = time.monotonic() - t0
    print(f"raft_sim: {n} seeds ({'quick' if a.quick else 'long'}) in {dt:.1f} s, {len(failed)} failed")
    print("  totals: " + ", ".join(f"{k}={totals[k]}" for k in sorted(totals)))
    if a.mutation:
        print(f"  mutation {a.mutation}: {'caught' if failed else 'NOT caught'}")
        return 0 if failed else 1
    if a.quick and not a.mutation and not a.hs_loss and not a.wipes and a.power_all is None:
        failed += _power_all(300)
        failed += _power_all(100, late=True)
    return 1 if failed else 0


def _power_all(n: int, late: bool = False) -> list:
    """Runs of run_power_all: a power cut of every node at once must never lose acknowledged entries silently
    (``late``: one member recovers through a leader, catching up through a snapshot)."""
    t0 = time.monotonic()
    failed = []
    losing = reporting = by_snapshot = 0
    kind = "late power-all" if late else "power-all"
    for seed in range(n):
        v, sim, lost = run_power_all(seed, late=late)
        losing += bool(lost)
        reporting += any(sn.node.lost is not None for sn in sim.nodes.values() if sn.up)
        by_snapshot += sim.stats["lost_found_by_snapshot"]
        if v:
            failed.append(seed)
            if len(failed) <= 10:
                print(f"FAIL {kind} seed {seed}: " + "; ".join(v[:3]))
    print(f"raft_sim: {n} {kind} runs in {time.monotonic() - t0:.1f} s, {len(failed)} failed; "
          f"{losing} lost acknowledged entries, {reporting} reported lost entries, {by_snapshot} found through a "
          f"snapshot")
    return failed


def _collect(r, failed, totals, flags):
    seed, v, summary, stats, log = r
    for k, c in stats.items():
        totals[k] = totals.get(k, 0) + c
    if v:
        failed.append(seed)
        if len(failed) <= 10:
            print(f"FAIL {summary}")
            for x in v[:5]:
                print(f"  {x}")
            print(f"  reproduce: python scripts/raft_sim.py --seed {seed}{flags}")


if __name__ == "__main__":
    sys.exit(main())
