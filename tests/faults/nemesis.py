"""The nemesis: a seeded schedule of faults and the code that applies and heals them.

Modes and the faults of each (one fault at a time; each lasts ``down`` seconds, then everything is
healed and the cluster gets ``gap`` seconds before the next):

* ``kill``: ``kill-leader`` (SIGKILL the stream leader, restart it), ``kill-random`` (one random server),
  ``kill-two`` (two random servers: no quorum)
* ``pause``: ``pause-leader``, ``pause-random`` (SIGSTOP, then SIGCONT)
* ``power``: ``power-random`` (one server loses power: SIGKILL, and its store loses what it had not
  fsynced, tests/faults/lazyfs.py), ``power-two`` (two at once), ``power-all`` (the whole cluster)
* ``drill``: ``wipe-random`` (a server stopped, its store directory deleted, started again: it must catch up
  and not be reported healthy before), ``wipe-while-down`` (the same while another server is SIGKILLed),
  ``kill-two``, ``kill-all`` (every server SIGKILLed at once); with ``--kv-limit`` the runner adds a KV bucket at
  its ``max_bytes`` (tests/faults/kvlimit.py)
* ``partition``: ``partition-random`` (one random server cut from the other two: minority/majority),
  ``partition-leader`` (the stream leader isolated), ``partition-bridge`` (two servers cut from each
  other, both still see the third), ``partition-link`` (a random server's veth down: cut from its
  clients too)

The plan is drawn from ``random.Random(seed)`` before the run; targets named "leader" are resolved when
the fault comes (the stream leader then, asked of the cluster), random targets come from the plan.
"""
from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from .cluster import Cluster, log

KINDS = {
    "kill": ["kill-leader", "kill-random", "kill-two"],
    "pause": ["pause-leader", "pause-random"],
    "partition": ["partition-random", "partition-leader", "partition-bridge", "partition-link"],
    "power": ["power-random", "power-two", "power-all"],
    "power-minority": ["power-random"],  # (one server at a time: what the default sync_interval must survive)
    # the operators' drills: a server whose store is wiped (also while another server is down), two killed at
    # once, all three killed (with --kv-limit the runner also fills a KV bucket at its max_bytes: kvlimit.py)
    "drill": ["wipe-random", "wipe-while-down", "kill-two", "kill-all"],
}


@dataclass
class Fault:
    mode: str
    kind: str
    down: float
    gap: float
    targets: tuple[int, ...]   # random targets drawn from the seed (the leader kinds may replace them)

    def __str__(self) -> str:
        return f"{self.kind}({','.join(f'n{t}' for t in self.targets)}) {self.down:.1f}s +{self.gap:.1f}s"


def make_plan(seed: int, modes: list[str], seconds: float, quick: bool = False, n: int = 3) -> list[Fault]:
    """Faults for each mode in turn, until ``seconds`` of that mode are planned. ``quick``: each kind of
    the mode once, in a seeded order, with short faults."""
    for m in modes:
        if m not in KINDS:
            raise ValueError(f"unknown nemesis mode {m!r} (modes: {', '.join(KINDS)})")
    rng = random.Random(seed)
    plan: list[Fault] = []
    for mode in modes:
        if quick:
            kinds = list(KINDS[mode])
            rng.shuffle(kinds)
        else:
            kinds = []
        t = 0.0
        while (quick and kinds) or (not quick and t < seconds):
            kind = kinds.pop() if quick else rng.choice(KINDS[mode])
            down = round(rng.uniform(2.0, 3.0) if quick else rng.uniform(1.0, 6.0), 1)
            gap = round(rng.uniform(1.5, 2.5) if quick else rng.uniform(1.0, 4.0), 1)
            targets = tuple(rng.sample(range(n), 2))
            plan.append(Fault(mode, kind, down, gap, targets))
            t += down + gap
    return plan


class Nemesis:
    def __init__(self, cluster: Cluster, leader_of) -> None:
        self.cluster = cluster
        self.leader_of = leader_of   # async () -> server index or None
        self.done: list[str] = []
        self.timeline: list[tuple[float, float, str]] = []   # (start, end, what), time.monotonic()

    async def target(self, f: Fault) -> list[int]:
        if f.kind.endswith("-leader"):
            li = await self.leader_of()
            if li is not None:
                return [li]
            log(f"{f.kind}: no stream leader known, taking n{f.targets[0]}")
        if f.kind in ("kill-two", "partition-bridge", "power-two"):
            return list(f.targets[:2])
        if f.kind in ("power-all", "kill-all"):
            return list(range(len(self.cluster.nodes)))
        if f.kind == "wipe-while-down":
            return list(f.targets[:2])  # (the first is wiped, the second is down meanwhile)
        return [f.targets[0]]

    async def apply(self, f: Fault) -> None:
        c = self.cluster
        t = await self.target(f)
        what = f"{f.kind} {' '.join(c.nodes[i].name for i in t)} for {f.down:.1f}s"
        log(f"nemesis: {what}")
        self.done.append(what)
        t0 = time.monotonic()
        try:
            await self._apply(f, t, what)
        finally:
            self.timeline.append((t0, time.monotonic(), what))
        await asyncio.sleep(f.gap)

    def during(self, t: float) -> str:
        """What the nemesis was doing at ``t`` (a fault, or the gap after one)."""
        for a, b, what in self.timeline:
            if a <= t <= b:
                return f"during {what}"
        prev = [(b, what) for a, b, what in self.timeline if b < t]
        if prev:
            b, what = prev[-1]
            return f"{t - b:.1f}s after {what} ended"
        return "before the first fault"

    async def _apply(self, f: Fault, t: list[int], what: str) -> None:
        c = self.cluster
        if f.kind.startswith("kill"):
            for i in t:
                c.nodes[i].kill()
            await asyncio.sleep(f.down)
            for i in t:
                c.nodes[i].start()
        elif f.kind == "wipe-random" or f.kind == "wipe-while-down":
            if f.kind == "wipe-while-down":
                c.nodes[t[1]].kill()
            c.nodes[t[0]].wipe()
            await asyncio.sleep(f.down)
            c.nodes[t[0]].start()
            if f.kind == "wipe-while-down":
                await asyncio.sleep(1.0)
                c.nodes[t[1]].start()
        elif f.kind.startswith("power"):
            for i in t:
                c.nodes[i].power_cut()
            await asyncio.sleep(f.down)
            for i in t:
                c.nodes[i].start()
        elif f.kind.startswith("pause"):
            for i in t:
                c.nodes[i].pause()
            await asyncio.sleep(f.down)
            for i in t:
                c.nodes[i].resume()
        elif f.kind.startswith("partition"):
            lab = c.lab
            if lab is None:
                log("nemesis: no network namespaces, partition skipped")
                self.done[-1] += " (skipped: no namespaces)"
                await asyncio.sleep(f.down)
                return
            if f.kind == "partition-bridge":
                lab.cut(t[0], t[1])
            elif f.kind == "partition-link":
                lab.link_down(t[0])
            else:
                lab.isolate(t[0])
            log(f"nemesis: cut {lab.describe()}")
            await asyncio.sleep(f.down)
            lab.heal_all()
        else:
            raise ValueError(f.kind)

    def heal(self) -> list[str]:
        done = self.cluster.heal_processes()
        if self.cluster.lab is not None and (self.cluster.lab.cut_pairs or self.cluster.lab.links_down):
            done.append(f"mend {self.cluster.lab.describe()}")
            self.cluster.lab.heal_all()
        return done
