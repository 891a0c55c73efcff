"""Pacing of CPython's cyclic garbage collector in the server process (issue 20: no pause may hold the loop).

The collector stops the world, and a collection of the oldest generation walks every tracked object that is
not frozen (~0.3 us each on the 2-core dev VM): a server holding 100,000 subscriptions (three tracked objects
each: the subscription, its sublist node, the node's dict) stalls its event loop ~100 ms per such collection,
and while a set like that grows, CPython runs one each time the old generation has grown by a quarter, so a
burst of SUBs costs several of them in a row.  With gc.disable() the stalls are gone; that is not an option
for a server (closed connections, consumers and streams are reference cycles).  What is done instead:

* once the server has started, one collection, then everything alive is frozen (``gc.freeze``: moved to the
  permanent generation, which no collection walks): modules, classes, the configuration, recovered streams;
  then the C heap's free pages go back to the system (``rillet.lane.trim_heap``, glibc ``malloc_trim``: what
  start-up left free inside the heap, ~1.5 MB of an idle server's memory, issue 20; compiled lane only).
* after every automatic collection of the oldest generation, what survived it is frozen too, so the next one
  walks only what has become old since: at most about ``t0 * t1 * t2`` objects (the thresholds below),
  whatever the size of the heap.
* objects frozen this way that later become cyclic garbage are reclaimed by a full collection (``gc.unfreeze``,
  ``gc.collect``, ``gc.freeze``) run from the loop at most every ``FULL_INTERVAL`` seconds, and only when
  something was frozen since the previous one.  That one pause is proportional to the heap, as every CPython
  collection of the oldest generation is without this pacing; it is the price of bounded memory.

The same goes for the interpreter's thread switch interval: while a worker thread computes (a stream config
with thousands of subjects is checked off the loop), the loop waits for the GIL up to the interval each time
it wants it back; SWITCH_INTERVAL (1 ms, CPython's default is 5 ms) halves what a bystander waits then.

``RILLET_GC=default`` in the environment leaves CPython's collector and switch interval as they are.
Only the server command (``rillet.server.main``) installs this: an application embedding a server keeps its
own collector settings.
"""
from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from typing import Any

# gen0 after 1,000 net new tracked objects (CPython: 700), gen1 every 10 gen0 collections, the oldest every
# 2 gen1 collections (CPython: 10): a young collection walks <= ~10,000 objects, an old one (frozen heap
# excluded) <= ~20,000 (~2.5 ms here; each object is walked by about one old collection before it is frozen,
# so smaller ones cost no more in all). 100,000 SUBs: old collections of 2-3 ms instead of 7-12 ms (t2 = 5).
THRESHOLDS = (1000, 10, 2)
SWITCH_INTERVAL = 0.001  # seconds (sys.setswitchinterval)
FULL_INTERVAL = 300.0  # seconds between full collections of the frozen heap (when anything was frozen since)


class GcPolicy:
    def __init__(self) -> None:
        self.installed = False
        self.frozen_since_full = False
        self.last_full = 0.0
        self.full_collections = 0
        self.old_collections = 0  # automatic collections of the oldest generation seen
        self.longest_old = 0.0  # seconds, the longest of them
        self._t0 = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._switch = 0.0  # the interval before install
        self._thresholds: tuple[int, int, int] | None = None  # the collector's thresholds before install

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called once the server is ready (start-up objects are frozen here)."""
        if self.installed or os.environ.get("RILLET_GC", "").lower() == "default":
            return
        self.installed = True
        self._loop = loop
        self._thresholds = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        gc.collect()
        gc.freeze()
        from rillet import lane
        lane.trim_heap()
        self.last_full = time.monotonic()
        gc.callbacks.append(self._on_gc)
        self._timer = loop.call_later(FULL_INTERVAL, self._full)

    def uninstall(self) -> None:
        if not self.installed:
            return
        self.installed = False
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        sys.setswitchinterval(self._switch)
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        gc.unfreeze()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        took = time.perf_counter() - self._t0
        self.old_collections += 1
        if took > self.longest_old:
            self.longest_old = took
        if self._in_full:
            return
        gc.freeze()  # the survivors of this collection are not walked again (until the next full one)
        self.frozen_since_full = True

    def freeze_loaded(self) -> None:
        """Modules loaded after the start (the JetStream API's, by its first request) join the frozen heap
        now, as start-up's did: otherwise the next collections of the oldest generation walk them all (one of
        16 ms right after the API's ~70 modules came in)."""
        if self.installed and not self._in_full:
            gc.freeze()
            self.frozen_since_full = True

    _in_full = False

    def _full(self) -> None:
        loop = self._loop
        self._timer = None
        if not self.installed or loop is None:
            return
        if self.frozen_since_full:
            self.full_collect()
        self._timer = loop.call_later(FULL_INTERVAL, self._full)

    def full_collect(self) -> int:
        """Collect everything, the frozen heap included, then freeze what is left; returns what was found."""
        self._in_full = True
        try:
            gc.unfreeze()
            found = gc.collect()
            gc.freeze()
        finally:
            self._in_full = False
        self.frozen_since_full = False
        self.last_full = time.monotonic()
        self.full_collections += 1
        return found


policy = GcPolicy()
