"""The deterministic RAFT simulator (rillet.raft.sim): a few hundred seeds of faults hold RAFT's safety
and liveness properties, runs reproduce from their seed, and the checker fails runs of broken nodes
and drivers. scripts/raft_sim.py --quick runs 2000 seeds in CI; longer runs are for outside CI."""
from __future__ import annotations

from collections import Counter

import pytest

from rillet.raft.sim import Sim, run_power_all, run_seed


def test_seeds_hold_safety_and_liveness():
    failed = []
    totals: Counter = Counter()
    for seed in range(300):
        v, sim = run_seed(seed, quick=True)
        totals.update(sim.stats)
        if v:
            failed.append((sim.summary(), v[:3], f"python scripts/raft_sim.py --seed {seed} --quick"))
    assert not failed, failed[:3]
    # the runs did exercise the faults and features the properties are about
    for k in ("crashes", "bounce", "partition", "oneway", "pause", "net", "snapshots_installed",
              "conf_changes_committed", "timeout_now", "unsynced_writes_at_crash", "wipe", "idle_wipes",
              "power_cuts", "recoveries"):
        assert totals[k] > 0, (k, totals)


def test_a_seed_reproduces():
    a, b = Sim(4242, quick=True), Sim(4242, quick=True)
    assert a.run() == b.run()
    assert (a.log, a.acked, a.summary(), a.stats) == (b.log, b.acked, b.summary(), b.stats)
    assert len({Sim(s, quick=True).n for s in range(20)}) == 2  # both 3- and 5-node clusters


@pytest.mark.parametrize("mutation,within", [("vote_any_log", 100), ("no_sync", 100), ("forget_vote", 600),
                                             ("no_recovery", 200)])
def test_checker_catches_a_broken_node(mutation, within):
    for seed in range(within):
        v, sim = run_seed(seed, quick=True, mutations={mutation})
        if v:
            assert any(("leader" in x or "lacks" in x or "safety" in x or "matching" in x) for x in v), v
            return
    pytest.fail(f"the checker did not catch mutation {mutation} within {within} seeds")


def test_unknown_mutation_is_refused():
    with pytest.raises(ValueError, match="unknown mutation"):
        Sim(1, mutations=frozenset({"nope"}))


def test_power_cut_of_every_node_is_never_silent():
    """Lazy fsync and every node's power cut at once: acknowledged entries are lost (nothing can keep them), but
    some node reports the lost range each time, and every range reported is really gone."""
    losing = 0
    for seed in range(150):
        v, sim, lost = run_power_all(seed)
        assert not v, (seed, v[:3])
        losing += bool(lost)
    assert losing > 20  # (the runs did lose acknowledged entries: the check above was exercised)
